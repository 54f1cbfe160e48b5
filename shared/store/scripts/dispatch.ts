import { LuaScript } from "../script.js";

/**
 * Scripts of dispatch: ready job attempts wait in queues (`queue:<script_type>`, or
 * `queue:runner:<id>` when pinned); a runner holds at most `concurrency` of them at once in its
 * slot set (`runner:<id>:slots`). Taking an attempt from a queue and a slot for it is one step,
 * so no runner is ever given more than its concurrency, whichever isolate dispatches. The commit
 * that ends an attempt frees its slot (commitFlow, op R). All keys are in the context's slot.
 */

/**
 * claimWork: give ready attempts to runners with free slots, in one step.
 *   KEYS[1]        the context hash (nothing is claimed while its dispatch is paused)
 *   KEYS[2..1+Q]   the queues
 *   KEYS[2+Q..]    each runner's slot set, in the order of the runners in ARGV
 *   ARGV[1]  now (epoch ms): the score of a claimed slot until its delivery is settled
 *   ARGV[2]  Q, the number of queues   ARGV[3]  R, the number of runners
 *   ARGV[4]  the most attempts to claim in this call
 *   then per runner: its id, its concurrency, n, and the positions (1..Q) of the n queues it
 *   takes from, in its order of preference
 * Queues are served in order; each takes as many items as the runners serving it have free
 * slots (within the limit). An item goes to the runner with the most free slots, except that a
 * retry marked `|a<id>` goes to runner <id> only when no other runner has room.
 * Returns {claims, free}: claims is {runner position, work item, queue position, ...} for what
 * was claimed (the avoid mark stripped); free is each runner's free slots afterwards. Both
 * empty while paused.
 * Cost: 2 + R + (queues with room) + (runners that got work) commands.
 */
export const claimWork = new LuaScript(
  "claimWork",
  `if redis.call("HGET", KEYS[1], "paused") == "true" then return {{}, {}} end
local Q, R, limit = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local runners, serving = {}, {}
for q = 1, Q do serving[q] = {} end
local i = 5
for r = 1, R do
  local run = { id = ARGV[i], slots = KEYS[1 + Q + r], claimed = {} }
  run.free = tonumber(ARGV[i + 1]) - redis.call("ZCARD", run.slots)
  local n = tonumber(ARGV[i + 2])
  for k = 1, n do
    local q = tonumber(ARGV[i + 2 + k])
    serving[q][#serving[q] + 1] = r
  end
  i = i + 3 + n
  runners[r] = run
end
local pairs_ = {}
for q = 1, Q do
  local room = 0
  for _, r in ipairs(serving[q]) do
    if runners[r].free > 0 then room = room + runners[r].free end
  end
  if room > limit then room = limit end
  if room > 0 then
    local taken = redis.call("LPOP", KEYS[1 + q], room)
    if taken then
      limit = limit - #taken
      for _, entry in ipairs(taken) do
        local item, avoid = string.match(entry, "^(.*)|a(%d+)$")
        if not item then item = entry end
        local best, fallback
        for _, r in ipairs(serving[q]) do
          local run = runners[r]
          if run.free > 0 then
            if run.id == avoid then
              fallback = fallback or r
            elseif not best or run.free > runners[best].free then
              best = r
            end
          end
        end
        best = best or fallback
        local run = runners[best]
        run.free = run.free - 1
        run.claimed[#run.claimed + 1] = ARGV[1]
        run.claimed[#run.claimed + 1] = item
        pairs_[#pairs_ + 1] = best
        pairs_[#pairs_ + 1] = item
        pairs_[#pairs_ + 1] = q
      end
    end
  end
end
local free = {}
for r = 1, R do
  if #runners[r].claimed > 0 then redis.call("ZADD", runners[r].slots, unpack(runners[r].claimed)) end
  free[r] = runners[r].free
end
return {pairs_, free}`,
);

/**
 * settleWork: end the claims of one dispatch round.
 *   KEYS     the slot sets and queues the groups name
 *   ARGV[1]  the score of a delivered item (DELIVERED_SCORE: later than any claim)
 *   ARGV[2..] groups: "D" (delivered: the slot is held until the attempt ends), slot set
 *            position, n, items; "G" (gone: the attempt no longer wants a runner; the slot is
 *            freed), slot set position, n, items; "B" (back: the runner could not take it; the
 *            slot is freed and the item goes back to the front of its queue), slot set position,
 *            queue position, n, items in queue order
 * An item is only marked or put back while it still holds its slot: a commit that ended the
 * attempt in the meantime freed the slot already, and the item must not come back.
 * Returns the number of items settled.
 */
export const settleWork = new LuaScript(
  "settleWork",
  `local settled = 0
local i = 2
while i <= #ARGV do
  local kind, slots = ARGV[i], KEYS[tonumber(ARGV[i + 1])]
  if kind == "B" then
    local queue, n = KEYS[tonumber(ARGV[i + 2])], tonumber(ARGV[i + 3])
    for k = i + 3 + n, i + 4, -1 do
      if redis.call("ZREM", slots, ARGV[k]) == 1 then
        redis.call("LPUSH", queue, ARGV[k])
        settled = settled + 1
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
return settled`,
);
