import { LuaScript } from "../script.js";

/**
 * The fold, as Lua shared by foldFigures and readContextFigures: pops up to ARGV[1] records off
 * KEYS[1] and adds them into the hash KEYS[2]; leaves `folded` (records taken) set.
 */
const FOLD = `local records = redis.call("LPOP", KEYS[1], tonumber(ARGV[1]))
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
`;

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
 * Returns { records folded }. (A refresh of /metrics folds with readContextFigures.)
 */
export const foldFigures = new LuaScript("foldFigures", `${FOLD}return { folded }`);

/**
 * readContextFigures: what a refresh of /metrics reads of one context, in one call: the fold of
 * foldFigures, then the counters, the context's runners and the sizes of its sorted sets.
 *   KEYS[1]  the context's figures list      KEYS[2]  the context's counters hash
 *   KEYS[3]  the context's runner index      KEYS[4..]  sorted sets to count (ZCARD each)
 *   ARGV[1]  most records to fold in this call
 * Returns { records folded, flat HGETALL of the counters, runner ids, ZCARD of KEYS[4], … }.
 */
export const readContextFigures = new LuaScript(
  "readContextFigures",
  `${FOLD}local out = { folded, redis.call("HGETALL", KEYS[2]), redis.call("ZRANGE", KEYS[3], 0, -1) }
for i = 4, #KEYS do out[#out + 1] = redis.call("ZCARD", KEYS[i]) end
return out`,
);

/**
 * countSets: the sizes of sorted sets of one slot (a context's runners' slot sets), in one call.
 *   KEYS  the sets
 * Returns { ZCARD of each, in order }.
 */
export const countSets = new LuaScript(
  "countSets",
  `local out = {}
for i = 1, #KEYS do out[i] = redis.call("ZCARD", KEYS[i]) end
return out`,
);

/**
 * keepFigures: keeps a reading of /metrics' figures for later scrapes, unless a reading taken
 * later is there already (a slow refresh never puts older figures back over newer ones, which
 * would make counters go back).
 *   KEYS[1]  the kept figures (`<taken ms>` and a newline, then the reading)
 *   ARGV[1]  when this reading was taken (ms)   ARGV[2]  the reading   ARGV[3]  how long to keep it (ms)
 * Returns 1 when kept, 0 when a later reading was there.
 */
export const keepFigures = new LuaScript(
  "keepFigures",
  `local held = redis.call("GET", KEYS[1])
if held then
  local taken = tonumber(string.match(held, "^(%d+)\\n"))
  if taken and taken >= tonumber(ARGV[1]) then return 0 end
end
redis.call("SET", KEYS[1], ARGV[1] .. "\\n" .. ARGV[2], "PX", ARGV[3])
return 1`,
);
