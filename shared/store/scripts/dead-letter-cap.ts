/**
 * The cap on a context's dead letters, shared by both scripts that write one (addDeadLetter, and
 * commitFlow's "X" operation): the letter is kept, and when that puts the context over its cap
 * the oldest (lowest score in the index) are dropped, each counted in the context's counters.
 */

/** Most dead letters a context keeps when neither it nor the deployment (DEAD_LETTERS_MAX) says. */
export const DEAD_LETTERS_MAX = 10_000;

/**
 * Most letters one write drops. A cap lowered far below what a context holds is reached over the
 * next writes, never by one script that blocks Redis while it deletes a million entries.
 */
export const DEAD_LETTERS_DROP_LIMIT = 1_000;

/** The field of the context's counters hash (Keys.contextCounters) that counts dropped letters. */
export const DROPPED_FIELD = "dead_letters_dropped";

/**
 * Lua: `keepDeadLetter(hash, index, context, counters, id, entry, score, fallback)` keeps one
 * letter (HSETNX, so a letter already there is left as it is and nothing is dropped: a replay is
 * harmless), then enforces the cap: the context hash's `retention` field (JSON) names it in
 * `dead_letters`; a missing or unreadable one (not an integer of at least 1) means `fallback`,
 * the deployment's. Returns 1 kept, 0 already there. Costs 4 commands (HSETNX, ZADD, HGET,
 * ZCARD), 4 more when it drops (ZRANGE, ZREM, HDEL, HINCRBY).
 */
export const KEEP_DEAD_LETTER = `local function keepDeadLetter(hash, index, context, counters, id, entry, score, fallback)
  if redis.call("HSETNX", hash, id, entry) == 0 then return 0 end
  redis.call("ZADD", index, score, id)
  local cap = tonumber(fallback)
  local raw = redis.call("HGET", context, "retention")
  if raw then
    local ok, retention = pcall(cjson.decode, raw)
    if ok and type(retention) == "table" then
      local own = retention["dead_letters"]
      if type(own) == "number" and own >= 1 and own == math.floor(own) then cap = own end
    end
  end
  local over = redis.call("ZCARD", index) - cap
  if over > 0 then
    if over > ${DEAD_LETTERS_DROP_LIMIT} then over = ${DEAD_LETTERS_DROP_LIMIT} end
    local oldest = redis.call("ZRANGE", index, 0, over - 1)
    redis.call("ZREM", index, unpack(oldest))
    redis.call("HDEL", hash, unpack(oldest))
    redis.call("HINCRBY", counters, "${DROPPED_FIELD}", #oldest)
  end
  return 1
end`;
