import { LuaScript } from "../script.js";
import { CLAIM_FROM_QUEUES } from "./claim.js";

/**
 * Scripts of dispatch: ready job attempts wait in their flow's queues (`queue:<script_type>:<flow>`,
 * or `queue:runner:<id>:<flow>` when pinned); a runner holds at most `concurrency` of them at once
 * in its slot set (`runner:<id>:slots`). Taking an attempt from a queue and a slot for it is one
 * step, so no runner is ever given more than its concurrency, no flow more than its max_parallel
 * and no context more than its max_inflight, whichever isolate dispatches. The commit that ends an
 * attempt frees its slot (commitFlow, op R). All keys are in the context's slot.
 */

/**
 * claimWork: give ready attempts to runners with free slots, in one step, flows taking turns.
 *   KEYS[1]        the context hash (nothing is claimed while its dispatch is paused; its
 *                  `max_inflight`, if set, caps the attempts held across all its runners)
 *   KEYS[2..1+Q]   the flows' queues, in turn order (priority first, then whose turn it is)
 *   KEYS[2+Q..]    each runner's slot set, in the order of the runners in ARGV
 *   ARGV[1]  now (epoch ms): the score of a claimed slot until its delivery is settled
 *   ARGV[2]  Q, the number of queues   ARGV[3]  R, the number of runners
 *   ARGV[4]  the most attempts to claim in this call
 *   ARGV[5]  "1" when a queue has a flow cap: slots are then read whole to count each flow's
 *   then per runner: its id, and its concurrency, or -1 for a runner that takes nothing now (in
 *   backoff, or a pull runner) and is only counted (when the context has a cap)
 *   then per queue: its priority, its flow id, the flow's cap (0: none), n, and the positions
 *   (1..R) of the n runners that may take from it
 * The rule is claimFromQueues's (scripts/claim.ts), which a commit's own claims follow too.
 * Returns {claims, drained}: claims is {runner position, work item, queue position, ...} (the
 * avoid mark stripped); drained the positions of queues found empty. Both empty while paused.
 * Cost: 2 + R' + (queues taken from) + (runners that got work) commands, where R' counts the
 * claiming runners, and the others too when the context has a cap.
 */
export const claimWork = new LuaScript(
  "claimWork",
  `${CLAIM_FROM_QUEUES}
local ctx = redis.call("HMGET", KEYS[1], "paused", "max_inflight")
if ctx[1] == "true" then return {{}, {}} end
local ctxCap = tonumber(ctx[2])
local Q, R, limit, perFlow = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4]), ARGV[5] == "1"
local runners, flows, total = {}, {}, 0
local i = 6
for r = 1, R do
  local run = { id = ARGV[i], slots = KEYS[1 + Q + r], claimed = {}, free = 0 }
  local conc = tonumber(ARGV[i + 1])
  i = i + 2
  local held = 0
  if perFlow then
    local members = redis.call("ZRANGE", run.slots, 0, -1)
    held = #members
    for _, m in ipairs(members) do
      local f = string.match(m, "^[^|]*|(%d+)|")
      if f then flows[f] = (flows[f] or 0) + 1 end
    end
  elseif conc >= 0 or ctxCap then
    held = redis.call("ZCARD", run.slots)
  end
  total = total + held
  if conc > held then run.free = conc - held end
  runners[r] = run
end
local queues = {}
for q = 1, Q do
  local e = { key = KEYS[1 + q], band = ARGV[i], flow = ARGV[i + 1], cap = tonumber(ARGV[i + 2]), serving = {}, pos = q }
  local n = tonumber(ARGV[i + 3])
  for k = 1, n do e.serving[k] = tonumber(ARGV[i + 3 + k]) end
  i = i + 4 + n
  queues[q] = e
end
local claims, drained = claimFromQueues(queues, runners, limit, ctxCap, total, flows, ARGV[1])
return {claims, drained}`,
);

/**
 * settleWork: end the claims of one dispatch round.
 *   KEYS     the context's counters (Keys.contextCounters), then the slot sets and queues the
 *            groups name
 *   ARGV[1]  the score of a delivered item (DELIVERED_SCORE: later than any claim)
 *   ARGV[2..] groups: "D" (delivered: the slot is held until the attempt ends), slot set
 *            position, n, items; "G" (gone: the attempt no longer wants a runner; the slot is
 *            freed), slot set position, n, items; "B" (back: the runner could not take it; the
 *            slot is freed and the item goes back to the front of its queue), slot set position,
 *            queue position, n, items in queue order
 * An item is only marked or put back while it still holds its slot: a commit that ended the
 * attempt in the meantime freed the slot already, and the item must not come back. Items put
 * back are counted as `refused` in the context's counters (once: only while they held a slot).
 * Returns the number of items settled.
 */
export const settleWork = new LuaScript(
  "settleWork",
  `local settled, refused = 0, 0
local i = 2
while i <= #ARGV do
  local kind, slots = ARGV[i], KEYS[tonumber(ARGV[i + 1])]
  if kind == "B" then
    local queue, n = KEYS[tonumber(ARGV[i + 2])], tonumber(ARGV[i + 3])
    for k = i + 3 + n, i + 4, -1 do
      if redis.call("ZREM", slots, ARGV[k]) == 1 then
        redis.call("LPUSH", queue, ARGV[k])
        settled = settled + 1
        refused = refused + 1
      end
    end
    i = i + 4 + n
  else
    local n = tonumber(ARGV[i + 2])
    if kind == "D" then
      local scored = {}
      for k = i + 3, i + 2 + n do
        scored[#scored + 1] = ARGV[1]
        scored[#scored + 1] = ARGV[k]
      end
      settled = settled + redis.call("ZADD", slots, "XX", "CH", unpack(scored))
    else
      settled = settled + redis.call("ZREM", slots, unpack(ARGV, i + 3, i + 2 + n))
    end
    i = i + 3 + n
  end
end
if refused > 0 then redis.call("HINCRBY", KEYS[1], "refused", refused) end
return settled`,
);

/**
 * markContext: write what the dispatcher tells commits and submissions into the context hash:
 * `dispatch_waiting` (which flows have queues in its ring: "none", one flow's id, or "*"), which
 * decides whether a commit may claim its own work (commitFlow's "C"), and `push_runners` (the
 * push runners such a claim may try, read with a submission's reservation: reserveFlow).
 * Written only into a context that exists: a context being deleted must not be brought back as
 * a hash of one field.
 *   KEYS[1]  the context hash    ARGV  field/value pairs
 * Returns 1 when written, 0 when there is no such context.
 */
export const markContext = new LuaScript(
  "markContext",
  `if redis.call("EXISTS", KEYS[1]) == 0 then return 0 end
redis.call("HSET", KEYS[1], unpack(ARGV))
return 1`,
);
