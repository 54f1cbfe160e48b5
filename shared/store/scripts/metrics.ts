import { LuaScript } from "../script.js";

/**
 * The fold, as a Lua function shared by foldFigures and readContextFigures: pops up to `limit`
 * records off the list `list` and adds them into the hash `counters`; returns the records
 * folded and the records popped (an unreadable one is popped, not folded).
 */
const FOLD = `local function fold(list, counters, limit)
  local records = redis.call("LPOP", list, limit)
  if not records then return 0, 0 end
  local folded = 0
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
  for field, n in pairs(sums) do redis.call("HINCRBY", counters, field, string.format("%.0f", n)) end
  return folded, #records
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
export const foldFigures = new LuaScript(
  "foldFigures",
  `${FOLD}local folded = fold(KEYS[1], KEYS[2], tonumber(ARGV[1]))
return { folded }`,
);

/**
 * readContextFigures: what a fresh reading of /metrics reads of some contexts (one on a Redis
 * Cluster, whose slots they do not share; up to 100 on one Redis), in one call: for each, the
 * fold of foldFigures, then its counters, its runners and the sizes of its sorted sets. The
 * records folded are bounded per context and per call, so one call never holds Redis long; those
 * left wait for the next reading or the context's sweep.
 *   KEYS     per context, in groups of the same size: its figures list, its counters hash, its
 *            runner index, then the sorted sets to count (ZCARD each)
 *   ARGV[1]  most records to fold per context   ARGV[2]  most records to fold in this call
 *   ARGV[3]  how many contexts KEYS holds
 * Returns per context { records folded, flat HGETALL of the counters, runner ids, ZCARD … }.
 */
export const readContextFigures = new LuaScript(
  "readContextFigures",
  `${FOLD}local limit, budget, n = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local per = #KEYS / n
local out = {}
for c = 0, n - 1 do
  local at = c * per
  local folded, popped = 0, 0
  if budget > 0 then folded, popped = fold(KEYS[at + 1], KEYS[at + 2], math.min(limit, budget)) end
  budget = budget - popped
  local one = { folded, redis.call("HGETALL", KEYS[at + 2]), redis.call("ZRANGE", KEYS[at + 3], 0, -1) }
  for i = at + 4, at + per do one[#one + 1] = redis.call("ZCARD", KEYS[i]) end
  out[#out + 1] = one
end
return out`,
);

/**
 * countSets: the sizes of sorted sets (a context's runners' slot sets; on one Redis, those of
 * up to 100 contexts), in one call.
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
