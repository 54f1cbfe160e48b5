import { LuaScript } from "../script.js";

/**
 * Scripts of runner records with their key index, the hash `runner_keys` (pubkey → runner id): a
 * public key is one runner's in a context, so revoking a runner's key (removing the runner, or
 * giving it another key) revokes it for whoever used it. Every key a script touches is in KEYS,
 * all in the context's slot.
 *
 * The index is written with the record in the same script, so it never names a runner that does
 * not hold the key.
 */

/**
 * createRunner: store a new runner unless its id is taken or its key is another runner's.
 *   KEYS[1]  the runner's hash   KEYS[2]  the context's runner index (sorted set)   KEYS[3]  runner_keys
 *   ARGV[1]  runner id (index member)   ARGV[2]  index score   ARGV[3]  the call's token
 *   ARGV[4]  its pubkey   ARGV[5..] field, value pairs
 * Returns {1} created (now, or by this same call before: its token is in `_op`); {0} the id is
 * taken (→ ConflictError); {2, holder} the key is runner holder's, nothing written.
 */
export const createRunner = new LuaScript(
  "createRunner",
  `if redis.call("EXISTS", KEYS[1]) == 1 then
  if redis.call("HGET", KEYS[1], "_op") == ARGV[3] then return {1} end
  return {0}
end
local holder = redis.call("HGET", KEYS[3], ARGV[4])
if holder and holder ~= ARGV[1] then return {2, tonumber(holder)} end
redis.call("HSET", KEYS[1], "_op", ARGV[3], unpack(ARGV, 5))
redis.call("ZADD", KEYS[2], ARGV[2], ARGV[1])
redis.call("HSET", KEYS[3], ARGV[4], ARGV[1])
return {1}`,
);

/**
 * updateRunnerKey: patch a runner whose patch gives it another public key, moving its index
 * entry from the old key to the new one.
 *   KEYS[1]  the runner's hash   KEYS[2]  runner_keys
 *   ARGV[1]  runner id   ARGV[2]  its pubkey as the caller read it   ARGV[3]  the new pubkey
 *   ARGV[4]  n, the number of fields to delete; ARGV[5..n+4] their names; then field, value pairs
 * Returns {1} updated (also when this same patch was applied before: the key is the new one
 * already); {0} no such runner; {2, holder} the new key is runner holder's, nothing written;
 * {4} its key changed since the caller read it.
 */
export const updateRunnerKey = new LuaScript(
  "updateRunnerKey",
  `if redis.call("EXISTS", KEYS[1]) == 0 then return {0} end
local current = redis.call("HGET", KEYS[1], "pubkey")
if current ~= ARGV[2] and current ~= ARGV[3] then return {4} end
local holder = redis.call("HGET", KEYS[2], ARGV[3])
if holder and holder ~= ARGV[1] then return {2, tonumber(holder)} end
local n = tonumber(ARGV[4])
if n > 0 then redis.call("HDEL", KEYS[1], unpack(ARGV, 5, n + 4)) end
if #ARGV > n + 4 then redis.call("HSET", KEYS[1], unpack(ARGV, n + 5)) end
redis.call("HSET", KEYS[2], ARGV[3], ARGV[1])
if ARGV[2] ~= ARGV[3] and redis.call("HGET", KEYS[2], ARGV[2]) == ARGV[1] then redis.call("HDEL", KEYS[2], ARGV[2]) end
return {1}`,
);

/**
 * deleteRunner: remove a runner, its index entry and its key's entry (if the key is still its).
 *   KEYS[1]  the runner's hash   KEYS[2]  the context's runner index   KEYS[3]  runner_keys
 *   ARGV[1]  runner id (index member)   ARGV[2]  its pubkey as the caller read it
 * Returns 1 deleted, 0 nothing to delete (→ NotFoundError), -1 its key changed since the caller
 * read it (read again).
 */
export const deleteRunner = new LuaScript(
  "deleteRunner",
  `local current = redis.call("HGET", KEYS[1], "pubkey")
if current and current ~= ARGV[2] then return -1 end
local n = redis.call("DEL", KEYS[1])
redis.call("ZREM", KEYS[2], ARGV[1])
if redis.call("HGET", KEYS[3], ARGV[2]) == ARGV[1] then redis.call("HDEL", KEYS[3], ARGV[2]) end
return n`,
);

/**
 * forgetRunnerKey: drop a context's entry of the hint `runner_key:<pubkey>`, but only if it still
 * names this runner (a runner registered since with the key in that context keeps its entry).
 *   KEYS[1]  runner_key:<pubkey>   ARGV[1]  context id   ARGV[2]  runner id
 * Returns 1 dropped, 0 it named another runner (or none).
 */
export const forgetRunnerKey = new LuaScript(
  "forgetRunnerKey",
  `if redis.call("HGET", KEYS[1], ARGV[1]) == ARGV[2] then return redis.call("HDEL", KEYS[1], ARGV[1]) end
return 0`,
);
