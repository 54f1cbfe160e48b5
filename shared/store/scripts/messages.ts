import { LuaScript } from "../script.js";

/**
 * Scripts of messages between actors (chat, mail, flow results). All keys in the context's slot.
 * A new message is stored and queued by createRecord (scripts/record.ts).
 */

/**
 * settleMessage: the relay hands a message to its recipient's inbox, or refuses it.
 *   KEYS[1]  the message hash   KEYS[2]  the recipient's msg_in   KEYS[3]  the in-flight set
 *   KEYS[4]  the context's inbox_due set
 *   ARGV[1]  "deliver" | "refuse"   ARGV[2]  now (epoch seconds)   ARGV[3]  reason (refuse; kept
 *            in the message's `subject`, which the sender reads)   ARGV[4]  its inbox_due entry
 * Returns 1 done; 0 the message was settled before, or is gone (nothing written but the
 * in-flight entry's removal).
 */
export const settleMessage = new LuaScript(
  "settleMessage",
  `redis.call("ZREM", KEYS[3], KEYS[1])
if redis.call("HGET", KEYS[1], "status") ~= "dispatched" then return 0 end
if ARGV[1] == "deliver" then
  redis.call("HSET", KEYS[1], "status", "acknowledged", "updated_at", ARGV[2])
  redis.call("RPUSH", KEYS[2], KEYS[1])
  redis.call("ZADD", KEYS[4], tonumber(ARGV[2]) * 1000, ARGV[4])
else
  redis.call("HSET", KEYS[1], "status", "error", "updated_at", ARGV[2], "subject", ARGV[3])
end
return 1`,
);

/**
 * readInbox: an actor's oldest messages, taken off the inbox or only looked at. A message taken
 * is removed (it was read: the inbox's retention rule), with its index and inbox_due entries.
 * The inbox's head is read before the call (LRANGE), so that every message key is in KEYS; a
 * pop takes it only if the inbox still starts with those keys (another reader may have been
 * first: the caller reads the head again).
 *   KEYS[1]  the actor's msg_in   KEYS[2]  the context's inbox_due set   KEYS[3]  the message index
 *   KEYS[4 …]  the message keys at the inbox's head, in order
 *   ARGV[1]  "pop" | "peek"   ARGV[2]  now (epoch seconds)   ARGV[3]  the actor's id
 *   ARGV[4 …]  each message's index member (`<caller>:<id>`), in the order of KEYS[4 …]
 * Returns {key, {field, value, ...}, ...}, a key whose message is gone skipped (removed with its
 * flow, or after the inbox window); -1 when a pop found the head changed (nothing written).
 */
export const readInbox = new LuaScript(
  "readInbox",
  `local n = #KEYS - 3
if ARGV[1] == "pop" then
  local head = redis.call("LRANGE", KEYS[1], 0, n - 1)
  if #head ~= n then return -1 end
  for i = 1, n do
    if head[i] ~= KEYS[i + 3] then return -1 end
  end
  redis.call("LTRIM", KEYS[1], n, -1)
end
local out = {}
for i = 4, #KEYS do
  local key = KEYS[i]
  local hash = redis.call("HGETALL", key)
  if #hash > 0 then
    if ARGV[1] == "pop" then
      for f = 1, #hash, 2 do
        if hash[f] == "status" then hash[f + 1] = "processed" end
        if hash[f] == "updated_at" then hash[f + 1] = ARGV[2] end
      end
      redis.call("UNLINK", key)
      redis.call("ZREM", KEYS[3], ARGV[i])
    end
    out[#out + 1] = key
    out[#out + 1] = hash
  end
  if ARGV[1] == "pop" then redis.call("ZREM", KEYS[2], ARGV[3] .. "|" .. key) end
end
return out`,
);

/**
 * expireInbox: removes messages left unread past the inbox window, a batch read before the call:
 * each entry still due goes off its recipient's msg_in (LREM from the head, where the oldest
 * are), its hash and index entry gone. An entry already gone (read, or expired by a call beside
 * this one) is skipped.
 *   KEYS[1]  the context's inbox_due set   KEYS[2]  the message index   KEYS[3 …]  recipients'
 *            msg_in and the messages' hashes
 *   ARGV     per entry: the entry (`<actor>|<message key>`), the position in KEYS of its msg_in
 *            and of its message's hash (0 and 0 for an entry that names none: it is only taken
 *            off inbox_due), its index member (`<caller>:<id>`, or "")
 * Returns how many were removed.
 */
export const expireInbox = new LuaScript(
  "expireInbox",
  `local removed = 0
for i = 1, #ARGV, 4 do
  local inbox, key = KEYS[tonumber(ARGV[i + 1])], KEYS[tonumber(ARGV[i + 2])]
  if redis.call("ZREM", KEYS[1], ARGV[i]) == 1 and key and inbox then
    redis.call("LREM", inbox, 1, key)
    redis.call("UNLINK", key)
    if ARGV[i + 3] ~= "" then redis.call("ZREM", KEYS[2], ARGV[i + 3]) end
    removed = removed + 1
  end
end
return removed`,
);
