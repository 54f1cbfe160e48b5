import { LuaScript } from "../script.js";

/**
 * putTemplate: a new version of a template, unless its file is the latest's (a PUT repeated),
 * all or nothing. A template not yet there is created and indexed, unless the context holds its
 * most templates already. The version is the next of the name's counter in the context's ids
 * (never given twice under one name, a delete included); past the versions kept, the oldest are
 * dropped.
 *   KEYS[1]  the template's hash (Keys.template)   KEYS[2]  the context's template index
 *   KEYS[3]  the context's id counters (Keys.ids)   KEYS[4]  the context's hash
 *   ARGV[1]  the name   ARGV[2]  its counter's field (Keys.templateCounter)
 *   ARGV[3]  the file's digest   ARGV[4]  the file (JSON)   ARGV[5]  the version's info (JSON, without `version`)
 *   ARGV[6]  now (epoch s)   ARGV[7]  the most templates a context holds   ARGV[8]  versions kept
 *   ARGV[9]  the description ("" for none)
 * Returns {1, version, oldest} made; {0, latest, oldest, latest's info} the file is the latest's;
 * {-1, templates held} the context holds its most; {-2} no such context, or one being deleted.
 */
export const putTemplate = new LuaScript(
  "putTemplate",
  `if redis.call("EXISTS", KEYS[4]) == 0 or redis.call("HEXISTS", KEYS[4], "deleting_since") == 1 then return {-2} end
local latest = tonumber(redis.call("HGET", KEYS[1], "latest"))
local oldest
if latest then
  oldest = tonumber(redis.call("HGET", KEYS[1], "oldest")) or latest
  if redis.call("HGET", KEYS[1], "digest") == ARGV[3] then
    return {0, latest, oldest, redis.call("HGET", KEYS[1], "m:" .. latest) or ""}
  end
else
  local held = redis.call("ZCARD", KEYS[2])
  if held >= tonumber(ARGV[7]) then return {-1, held} end
  redis.call("HSET", KEYS[1], "name", ARGV[1], "created_at", ARGV[6])
  redis.call("ZADD", KEYS[2], 0, ARGV[1])
end
local v = redis.call("HINCRBY", KEYS[3], ARGV[2], 1)
oldest = oldest or v
redis.call("HSET", KEYS[1], "f:" .. v, ARGV[4], "m:" .. v, ARGV[5], "latest", v, "digest", ARGV[3], "updated_at", ARGV[6])
if ARGV[9] ~= "" then redis.call("HSET", KEYS[1], "description", ARGV[9]) else redis.call("HDEL", KEYS[1], "description") end
local keep = tonumber(ARGV[8])
while v - oldest + 1 > keep do
  redis.call("HDEL", KEYS[1], "f:" .. oldest, "m:" .. oldest)
  oldest = oldest + 1
end
redis.call("HSET", KEYS[1], "oldest", oldest)
return {1, v, oldest}`,
);

/**
 * readTemplate: a template's summary with one version (its info and file), or with the info of
 * every version it keeps (no files): one command, however the version is named.
 *   KEYS[1]  the template's hash
 *   ARGV[1]  a version number, "latest", or "all"
 * Returns {} when there is no such template; else {name, created_at, updated_at, latest, oldest,
 * description ("" for none), …}, then for a version: {version, info, file} ("" for a version not
 * kept), for "all": each kept version's info, newest first.
 */
export const readTemplate = new LuaScript(
  "readTemplate",
  `local h = redis.call("HMGET", KEYS[1], "name", "created_at", "updated_at", "latest", "oldest", "description")
if not h[1] then return {} end
local out = {h[1], h[2], h[3], h[4], h[5], h[6] or ""}
local fields = {}
if ARGV[1] == "all" then
  for v = tonumber(h[4]), tonumber(h[5]), -1 do fields[#fields + 1] = "m:" .. v end
else
  local v = ARGV[1] == "latest" and h[4] or ARGV[1]
  out[#out + 1] = v
  fields = {"m:" .. v, "f:" .. v}
end
if #fields == 0 then return out end
for _, value in ipairs(redis.call("HMGET", KEYS[1], unpack(fields))) do out[#out + 1] = value or "" end
return out`,
);

/**
 * deleteTemplate: a template's hash (every version) and its index entry. Idempotent; the name's
 * version counter stays, so its numbers are not given again.
 *   KEYS[1]  the template's hash   KEYS[2]  the template index
 *   ARGV[1]  the name
 * Returns 1 deleted, 0 already gone.
 */
export const deleteTemplate = new LuaScript(
  "deleteTemplate",
  `redis.call("ZREM", KEYS[2], ARGV[1])
return redis.call("DEL", KEYS[1])`,
);
