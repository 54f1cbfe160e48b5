import { LuaScript } from "../script.js";

/**
 * Scripts of messages between actors (chat, mail, flow results). All keys in the context's slot.
 * A new message is stored and queued by createRecord (scripts/record.ts).
 */

/**
 * settleMessage: the relay hands a message to its recipient's inbox, or refuses it.
 *   KEYS[1]  the message hash   KEYS[2]  the recipient's msg_in   KEYS[3]  the in-flight set
 *   ARGV[1]  "deliver" | "refuse"   ARGV[2]  now (epoch seconds)   ARGV[3]  reason (refuse; kept
 *            in the message's `subject`, which the sender reads)
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
else
  redis.call("HSET", KEYS[1], "status", "error", "updated_at", ARGV[2], "subject", ARGV[3])
end
return 1`,
);

/**
 * readInbox: an actor's oldest messages, taken off the inbox (and marked processed) or left.
 *   KEYS[1]  the actor's msg_in
 *   ARGV[1]  how many   ARGV[2]  "pop" | "peek"   ARGV[3]  now (epoch seconds)
 * Returns {key, {field, value, ...}, ...}; a key whose message is gone is skipped.
 */
export const readInbox = new LuaScript(
  "readInbox",
  `local keys
if ARGV[2] == "pop" then
  keys = redis.call("LPOP", KEYS[1], tonumber(ARGV[1])) or {}
else
  keys = redis.call("LRANGE", KEYS[1], 0, tonumber(ARGV[1]) - 1)
end
local out = {}
for _, key in ipairs(keys) do
  if ARGV[2] == "pop" and redis.call("EXISTS", key) == 1 then
    redis.call("HSET", key, "status", "processed", "updated_at", ARGV[3])
  end
  local hash = redis.call("HGETALL", key)
  if #hash > 0 then
    out[#out + 1] = key
    out[#out + 1] = hash
  end
end
return out`,
);
