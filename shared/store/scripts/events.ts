import { LuaScript } from "../script.js";

/**
 * sendEvent: takes an event for a context's waits, once per id. Reads the waits indexed under
 * its name and key, keeps it for waits that start later (when the context keeps events), and
 * remembers the id with what it matched, so the same id again is answered from that record (its
 * waits get it again: at-least-once, each wait takes it once).
 *   KEYS[1]  the sent event's record (Keys.sentEvent)
 *   KEYS[2]  the waits for its name and key (Keys.waits)
 *   KEYS[3]  the events kept for its name and key (Keys.keptEvents)
 *   ARGV[1]  the event's digest (its name, key and data)   ARGV[2]  now (epoch ms)
 *   ARGV[3]  the context's lookback in ms (0: nothing is kept)   ARGV[4]  the event as kept (JSON)
 *   ARGV[5]  how long the id is remembered (s)   ARGV[6]  the most waits one event resumes
 *   ARGV[7]  the most events kept per name and key
 * Returns {0, record} for a new event, {1, record} for an id seen before; the record is
 * "<digest>|<waits>|<more: 0 or 1>", the waits comma-separated `<flow>:<job>` members.
 * Cost: GET, ZRANGE, ZCARD, SET (4 commands and the call), and ZADD, ZREMRANGEBYSCORE,
 * ZREMRANGEBYRANK and PEXPIRE when events are kept.
 */
export const sendEvent = new LuaScript(
  "sendEvent",
  `local seen = redis.call("GET", KEYS[1])
if seen then return {1, seen} end
local limit = tonumber(ARGV[6])
local waits = redis.call("ZRANGE", KEYS[2], 0, limit - 1)
local more = redis.call("ZCARD", KEYS[2]) > limit and "1" or "0"
local lookback = tonumber(ARGV[3])
if lookback > 0 then
  local now = tonumber(ARGV[2])
  -- Scored by when the event stops being kept, so a read needs no window: what scores past now is kept.
  redis.call("ZADD", KEYS[3], now + lookback, ARGV[4])
  redis.call("ZREMRANGEBYSCORE", KEYS[3], "-inf", now)
  redis.call("ZREMRANGEBYRANK", KEYS[3], 0, -tonumber(ARGV[7]) - 1)
  redis.call("PEXPIRE", KEYS[3], lookback)
end
local record = table.concat({ ARGV[1], table.concat(waits, ","), more }, "|")
redis.call("SET", KEYS[1], record, "EX", tonumber(ARGV[5]))
return {0, record}`,
);
