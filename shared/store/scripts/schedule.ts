import { LuaScript } from "../script.js";

/**
 * createSchedule: write a new schedule's hash under the id taken for it and index it, all or
 * nothing; or, when the Idempotency-Key was seen, nothing.
 *   KEYS[1]  the schedule's hash   KEYS[2]  the schedule index
 *   KEYS[3]  the Idempotency-Key's record (optional: Keys.scheduleIdempotency)
 *   ARGV[1]  the schedule's id   ARGV[2]  how long the Idempotency-Key is kept (seconds)
 *   ARGV[3]  the request's digest
 *   ARGV[4…] the record's field / value pairs (without `id`; with `_op`, the schedule's
 *            incarnation token, which its Scheduler object keeps too)
 * Returns {0, "<id>"}, or {1, "<id>:<digest>"} when the Idempotency-Key created schedule `id`
 * before, for a request of that digest.
 */
export const createSchedule = new LuaScript(
  "createSchedule",
  `if KEYS[3] then
  local seen = redis.call("GET", KEYS[3])
  if seen then return {1, seen} end
end
redis.call("HSET", KEYS[1], "id", ARGV[1], unpack(ARGV, 4))
redis.call("ZADD", KEYS[2], ARGV[1], ARGV[1])
if KEYS[3] then redis.call("SET", KEYS[3], ARGV[1] .. ":" .. ARGV[3], "EX", tonumber(ARGV[2])) end
return {0, ARGV[1]}`,
);

/**
 * updateSchedule: change fields of a schedule that exists (never brings a deleted one back).
 *   KEYS[1]  the schedule hash
 *   ARGV[1]  n, the number of field / value pairs that follow   ARGV[2 … 2n+1] the pairs
 *   ARGV[2n+2 …] fields to delete
 * Returns 1 changed, 0 no such schedule (→ NotFoundError).
 */
export const updateSchedule = new LuaScript(
  "updateSchedule",
  `if redis.call("EXISTS", KEYS[1]) == 0 then return 0 end
local n = tonumber(ARGV[1])
if n > 0 then redis.call("HSET", KEYS[1], unpack(ARGV, 2, 2 * n + 1)) end
if #ARGV > 2 * n + 1 then redis.call("HDEL", KEYS[1], unpack(ARGV, 2 * n + 2)) end
return 1`,
);

/**
 * deleteSchedule: remove a schedule's hash and its index entry. Idempotent.
 *   KEYS[1]  the schedule hash   KEYS[2]  the schedule index
 *   ARGV[1]  the schedule id
 * Returns 1 deleted, 0 already gone.
 */
export const deleteSchedule = new LuaScript(
  "deleteSchedule",
  `redis.call("ZREM", KEYS[2], ARGV[1])
return redis.call("DEL", KEYS[1])`,
);
