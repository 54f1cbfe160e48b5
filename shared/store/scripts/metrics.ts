import { LuaScript } from "../script.js";

/**
 * foldFigures: add a context's pending figure records into its counters, in one step, so that
 * concurrent folds (two scrapes, a scrape and a sweep) never count a record twice or lose one:
 * a record is popped and added by the same script.
 *
 * A record is a JSON object (`FlowFigures`, shared/flow/figures.ts): a number is added to the
 * counter of its name, the i-th number of an array to `<name>:<i>` (0-based). Zeros are skipped;
 * each field is written once per call whatever the number of records.
 *   KEYS[1]  the context's figures list (records, oldest first)
 *   KEYS[2]  the context's counters hash
 *   ARGV[1]  most records to fold in this call
 *   ARGV[2]  "read": also return the counters; anything else: return nothing but the count
 * Returns { records folded, flat HGETALL of the counters (only with "read") }.
 */
export const foldFigures = new LuaScript(
  "foldFigures",
  `local records = redis.call("LPOP", KEYS[1], tonumber(ARGV[1]))
local folded = 0
if records then
  local sums = {}
  local add = function(field, n)
    if type(n) == "number" and n ~= 0 then sums[field] = (sums[field] or 0) + n end
  end
  for _, raw in ipairs(records) do
    local ok, record = pcall(cjson.decode, raw)
    if ok and type(record) == "table" then
      folded = folded + 1
      for name, value in pairs(record) do
        if type(value) == "table" then
          for i, n in ipairs(value) do add(name .. ":" .. (i - 1), n) end
        else
          add(name, value)
        end
      end
    end
  end
  for field, n in pairs(sums) do redis.call("HINCRBY", KEYS[2], field, string.format("%.0f", n)) end
end
if ARGV[2] == "read" then return { folded, redis.call("HGETALL", KEYS[2]) } end
return { folded }`,
);
