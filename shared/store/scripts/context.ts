import { LuaScript } from "../script.js";

/**
 * changePermission: add an actor to, or remove it from, one permission list of a context, in
 * place, so concurrent grants never undo each other. Idempotent: granting twice changes nothing.
 *   KEYS[1]  the context hash
 *   ARGV[1]  list: admins | readers | executors
 *   ARGV[2]  actor id
 *   ARGV[3]  "grant" | "revoke"
 *   ARGV[4]  now (epoch seconds), the new updated_at
 * Returns 1 changed, 0 already so, -1 no such context (→ NotFoundError),
 *        -2 would remove the last admin (→ ConflictError).
 */
export const changePermission = new LuaScript(
  "changePermission",
  `local raw = redis.call("HGET", KEYS[1], ARGV[1])
if not raw then return -1 end
local list = cjson.decode(raw)
local id = tonumber(ARGV[2])
local at = nil
for i, v in ipairs(list) do if v == id then at = i end end
if ARGV[3] == "grant" then
  if at then return 0 end
  table.insert(list, id)
else
  if not at then return 0 end
  if ARGV[1] == "admins" and #list == 1 then return -2 end
  table.remove(list, at)
end
local encoded = "[]"
if #list > 0 then encoded = cjson.encode(list) end
redis.call("HSET", KEYS[1], ARGV[1], encoded, "updated_at", ARGV[4])
return 1`,
);

/**
 * deleteNamespace: delete up to COUNT keys of a context per call (SCAN + UNLINK), so deleting a
 * large context is a loop of bounded steps rather than one long-blocking script: the last step of
 * a context's deletion, for whatever its flows, runners and schedules did not take with them.
 *   KEYS[1]  the context hash (deleted first)
 *   ARGV[1]  SCAN cursor ("0" to start)   ARGV[2]  MATCH pattern (the namespace)   ARGV[3]  COUNT
 * Returns the next cursor; "0" when the namespace is empty.
 */
export const deleteNamespace = new LuaScript(
  "deleteNamespace",
  `redis.call("UNLINK", KEYS[1])
local page = redis.call("SCAN", ARGV[1], "MATCH", ARGV[2], "COUNT", ARGV[3])
if #page[2] > 0 then redis.call("UNLINK", unpack(page[2])) end
return page[1]`,
);

/**
 * dropRunners: deletes runners of a context (their hashes, slot sets and index entries) in one
 * step: the first step of deleting a context, so their keys stop working at once.
 *   KEYS[1]  the runner index   KEYS[2i], KEYS[2i+1]  runner i's hash and slot set
 *   ARGV[i]  runner i's id
 * Returns how many it deleted.
 */
export const dropRunners = new LuaScript(
  "dropRunners",
  `for i, id in ipairs(ARGV) do
  redis.call("UNLINK", KEYS[2 * i], KEYS[2 * i + 1])
  redis.call("ZREM", KEYS[1], id)
end
return #ARGV`,
);
