import { LuaScript } from "../script.js";

/**
 * takeFlowStart: one start from a context's flow-start budget, by the generic cell rate algorithm
 * (GCRA): starts are due one every `interval` ms, and up to `burst` may come at once; the key
 * holds the theoretical arrival time of the next start (TAT), so the budget is one string.
 *   KEYS[1]  the throttle key (Keys.flowStarts)
 *   ARGV[1]  now (epoch ms)   ARGV[2]  interval (ms per start)   ARGV[3]  burst (starts at once)
 * Returns 0 when the start is taken, else how many ms until one would be (nothing is written).
 * Cost: 3 commands (EVALSHA, GET, SET).
 */
export const takeFlowStart = new LuaScript(
  "takeFlowStart",
  `local now, interval, burst = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local tat = tonumber(redis.call("GET", KEYS[1]) or "0")
if tat < now then tat = now end
local wait = tat - now - interval * (burst - 1)
if wait > 0 then return math.ceil(wait) end
local next = tat + interval
redis.call("SET", KEYS[1], string.format("%d", next), "PX", next - now + 1000)
return 0`,
);
