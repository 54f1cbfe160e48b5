import { LuaScript } from "../script.js";
import { SLICED } from "./sliced.js";

/**
 * purgeOwner: removes (part of) an ended flow, or of an ended job outside any flow, with
 * everything it owns: its job and message hashes, and its entries in the context's indexes. A
 * large flow is removed in chunks, one call each; the owner's own record goes in the last, so an
 * interrupted removal is found again (by the sweep, through `ended:<status>`) and finished.
 *   KEYS[1]            the owner: the flow hash, or the job's hash for a job outside any flow
 *   KEYS[2 .. 1 + X]   keys whose members go (X = ARGV[3]): ZREM from sorted sets, LREM from lists
 *   KEYS[2 + X ..]     keys to delete (UNLINK): job and message hashes
 *   ARGV[1]  "ended": only if the owner ended (status finished, error, compensated or
 *            compensation_failed, and for a flow its
 *            `ended_at` set); "force": whatever its status (the context is being deleted)
 *   ARGV[2]  "1" when this is the last chunk: the owner's record goes too
 *   ARGV[3]  X; then per key of KEYS[2 .. 1 + X]: "Z" or "L", the number of members n, n members
 * Returns "removed"; "gone" when the owner was not there (removed before: only the index
 * entries named here go then, no key, unless forced); or the owner's status when it has not
 * ended (nothing done).
 */
export const purgeOwner = new LuaScript(
  "purgeOwner",
  `${SLICED}
local status = redis.call("HGET", KEYS[1], "status")
if ARGV[1] == "ended" and status then
  local ended = status == "finished" or status == "error" or status == "compensated" or status == "compensation_failed"
  if ended and redis.call("HEXISTS", KEYS[1], "flow_id") == 0 then
    ended = redis.call("HEXISTS", KEYS[1], "ended_at") == 1
  end
  if not ended then return status end
end
local x = tonumber(ARGV[3])
local i = 4
for k = 1, x do
  local op, n = ARGV[i], tonumber(ARGV[i + 1])
  local key = KEYS[1 + k]
  if op == "Z" then
    if n > 0 then sliced("ZREM", key, ARGV, i + 2, i + 1 + n) end
  else
    for m = i + 2, i + 1 + n do redis.call("LREM", key, 1, ARGV[m]) end
  end
  i = i + 2 + n
end
-- Gone (removed before): its index entries went above, and no key is deleted.
if not status and ARGV[1] == "ended" then return "gone" end
if #KEYS > 1 + x then sliced("UNLINK", nil, KEYS, 2 + x, #KEYS) end
if ARGV[2] == "1" then redis.call("UNLINK", KEYS[1]) end
if not status then return "gone" end
return "removed"`,
);
