import { LuaScript } from "../script.js";

/**
 * Scripts for plain records (one hash plus its index entry). State transitions of flows and jobs
 * have their own scripts; these only create, patch and delete.
 *
 * Every key a script touches is in KEYS and in one slot (the context's hash tag), so they run
 * on a Redis Cluster too.
 */

/**
 * createRecord: store a new hash unless its key is taken, index it, and (for a message) queue
 * it, all or nothing. The hash keeps the creating call's token in `_op`, so a call retried after
 * it succeeded (the client's own retry of a request whose answer was lost) is told it created
 * the record, and nothing is indexed or queued twice.
 *   KEYS[1]  the record's hash
 *   KEYS[2]  the index sorted set (optional; same slot as KEYS[1])
 *   KEYS[3]  a list to push the record's key onto: msg_out for a message (optional; needs KEYS[2])
 *   ARGV[1]  index member      ARGV[2]  index score      ARGV[3]  the call's token
 *   ARGV[4..] field, value pairs
 * Returns 1 when created (now or by this same call before), 0 when the key was taken by someone
 * else (nothing written) → ConflictError.
 */
export const createRecord = new LuaScript(
  "createRecord",
  `if redis.call("EXISTS", KEYS[1]) == 1 then
  if redis.call("HGET", KEYS[1], "_op") == ARGV[3] then return 1 end
  return 0
end
redis.call("HSET", KEYS[1], "_op", ARGV[3], unpack(ARGV, 4))
if KEYS[2] then redis.call("ZADD", KEYS[2], ARGV[2], ARGV[1]) end
if KEYS[3] then redis.call("RPUSH", KEYS[3], KEYS[1]) end
return 1`,
);

/**
 * updateRecord: patch fields of an existing hash; never creates one.
 *   KEYS[1]  the record's hash
 *   ARGV[1]  n, the number of fields to delete; ARGV[2..n+1] their names
 *   ARGV[n+2..] field, value pairs to set
 * Returns 1 when updated, 0 when the record does not exist (nothing written) → NotFoundError.
 */
export const updateRecord = new LuaScript(
  "updateRecord",
  `if redis.call("EXISTS", KEYS[1]) == 0 then return 0 end
local n = tonumber(ARGV[1])
if n > 0 then redis.call("HDEL", KEYS[1], unpack(ARGV, 2, n + 1)) end
if #ARGV > n + 1 then redis.call("HSET", KEYS[1], unpack(ARGV, n + 2)) end
return 1`,
);

/**
 * deleteRecord: remove a hash and its index entry together.
 *   KEYS[1]  the record's hash     KEYS[2]  the index sorted set (optional)
 *   ARGV[1]  index member
 * Returns 1 when deleted, 0 when there was nothing to delete → NotFoundError.
 */
export const deleteRecord = new LuaScript(
  "deleteRecord",
  `local n = redis.call("DEL", KEYS[1])
if KEYS[2] then redis.call("ZREM", KEYS[2], ARGV[1]) end
return n`,
);
