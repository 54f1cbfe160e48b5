import { LuaScript } from "../script.js";

/**
 * claimDue: a page of the contexts due for the sweep, each pushed a lease ahead in the same step,
 * so an overlapping sweep does not take them again and one whose sweep fails comes back when the
 * lease ends.
 *   KEYS[1]  sweep:due
 *   ARGV[1]  now (epoch ms)   ARGV[2]  the lease's end (epoch ms)   ARGV[3]  most contexts
 * Returns the contexts' ids (strings), oldest due first.
 */
export const claimDue = new LuaScript(
  "claimDue",
  `local due = redis.call("ZRANGEBYSCORE", KEYS[1], "-inf", ARGV[1], "LIMIT", 0, tonumber(ARGV[3]))
for _, context in ipairs(due) do redis.call("ZADD", KEYS[1], "XX", ARGV[2], context) end
return due`,
);

/** A message waiting in msg_out brings the context back this soon (ms), a wake owed this soon. */
const MAIL_RECHECK_MS = 30_000;
const WAKE_OWED_MS = 60_000;

/**
 * What the sweep reads of a context, and the one rule of when the context is next due: the lookup
 * and the settle both run it, on the keys as they are when each runs. KEYS 1 to 9 and ARGV
 * 1 to 6 are those of both scripts:
 *   KEYS[1] deadlines  [2] msg_out  [3] inflight  [4] ended:finished  [5] ended:error
 *   [6] inbox_due  [7] the context's hash  [8] deleting:context, or on a Redis Cluster the
 *   context's hash again (the list is in another slot: its deletion is read from the hash's
 *   `deleting_since`)  [9] figures
 *   ARGV[1] the context's id  [2] now (epoch ms)  [3] the retention the windows below come from:
 *   "-" (the context has none of its own) or "=" followed by its `retention` field as stored
 *   [4] [5] [6] the finished, error and inbox windows (ms)
 * The windows hold only while the stored field is the one named (`held`); when it is not, the
 * context is due at once (its caller reads it again).
 */
const CONTEXT_READ = `local now = tonumber(ARGV[2])
local function first(key)
  local r = redis.call("ZRANGE", key, 0, 0, "WITHSCORES")
  if r[2] then return tonumber(r[2]) end
end
local function plus(at, ms) if at then return at + ms end end
local function earliest(...)
  local m
  for i = 1, select("#", ...) do
    local v = select(i, ...)
    if v and (not m or v < m) then m = v end
  end
  return m
end
local raw = redis.call("HGET", KEYS[7], "retention")
local held = (not raw and ARGV[3] == "-") or (raw and ARGV[3] == "=" .. raw) or false
local waiting = redis.call("LLEN", KEYS[2])
local inflight = first(KEYS[3])
local deleting
if KEYS[8] == KEYS[7] then
  local since = redis.call("HGET", KEYS[7], "deleting_since")
  if since then deleting = tonumber(since) * 1000 end
else
  deleting = redis.call("ZSCORE", KEYS[8], ARGV[1])
end
local owed = redis.call("HGET", KEYS[7], "wake_owed")
local retention_at
if held then
  retention_at = earliest(plus(first(KEYS[4]), tonumber(ARGV[4])), plus(first(KEYS[5]), tonumber(ARGV[5])),
    plus(first(KEYS[6]), tonumber(ARGV[6])))
end
-- The nearest of: a flow's check time, mail waiting, mail in flight to settle, what retention
-- removes next, a wake owed; at once while a deletion goes on, when the policy is not the one
-- the windows came from, or when the caller left more to do (more). Never sooner than a second.
local function next_due(more)
  local at = earliest(first(KEYS[1]), waiting > 0 and now + ${MAIL_RECHECK_MS} or nil, plus(inflight, 1000),
    retention_at, owed and now + ${WAKE_OWED_MS} or nil, (deleting or more or not held) and now or nil)
  if at and at < now + 1000 then at = now + 1000 end
  return at
end`;

/**
 * lookAtContext: what a context has for its sweep, in one call (CONTEXT_READ gives KEYS 1-9 and
 * ARGV 1-6).
 *   KEYS[10 ..]  the slot sets of the runners the dispatcher knows
 *   ARGV[7]  most due flows to return   ARGV[8]  DELIVERED_SCORE (a slot's score once delivered)
 * Returns { flows and jobs outside flows whose check time passed (deadline members), the
 * `retention` field or nil, 1 when the windows held else 0, when retention next removes
 * something (-1: nothing), when the deletion began (-1: none), the wake owed's token or nil,
 * messages in msg_out, when the first message in flight must be settled (-1: none), figure
 * records waiting, the oldest claim not yet delivered in those slot sets (-1: none) }.
 */
export const lookAtContext = new LuaScript(
  "lookAtContext",
  `${CONTEXT_READ}
local due = redis.call("ZRANGEBYSCORE", KEYS[1], "-inf", ARGV[2], "LIMIT", 0, tonumber(ARGV[7]))
local oldest
for i = 10, #KEYS do
  local r = redis.call("ZRANGEBYSCORE", KEYS[i], "-inf", "(" .. ARGV[8], "LIMIT", 0, 1, "WITHSCORES")
  if r[2] then oldest = earliest(oldest, tonumber(r[2])) end
end
return { due, raw, held and 1 or 0, retention_at or -1, deleting and tonumber(deleting) or -1, owed,
  waiting, inflight or -1, redis.call("LLEN", KEYS[9]), oldest or -1 }`,
);

/**
 * settleContext: ends a context's sweep. Sets when the context is next due from its keys as they
 * are now (CONTEXT_READ gives KEYS 1-9 and ARGV 1-6), so whatever changed during the sweep (a
 * flow started, mail came, a deletion began) is counted, and counts the sweep.
 *   KEYS[10]  sweep:due   KEYS[11]  the global counters: both absent on a Redis Cluster (another
 *   slot), where the caller writes them after the script (SweepStore.settle)
 *   ARGV[7]  "1" when the sweep left more to do (due again at once)
 *   ARGV[8]  the token of the wake owed the sweep carried out ("": none): taken away if still there
 *   ARGV[9]  flows poked   ARGV[10]  pokes that failed
 * Returns when the context is next due (epoch ms), or -1 when it has nothing (out of sweep:due).
 */
export const settleContext = new LuaScript(
  "settleContext",
  `if ARGV[8] ~= "" and redis.call("HGET", KEYS[7], "wake_owed") == ARGV[8] then
  redis.call("HDEL", KEYS[7], "wake_owed")
end
${CONTEXT_READ}
local at = next_due(ARGV[7] == "1")
if not KEYS[10] then return at or -1 end
if at then redis.call("ZADD", KEYS[10], at, ARGV[1]) else redis.call("ZREM", KEYS[10], ARGV[1]) end
redis.call("HINCRBY", KEYS[11], "settled", 1)
if tonumber(ARGV[9]) > 0 then redis.call("HINCRBY", KEYS[11], "poked", ARGV[9]) end
if tonumber(ARGV[10]) > 0 then redis.call("HINCRBY", KEYS[11], "sweep_failures", ARGV[10]) end
return at or -1`,
);
