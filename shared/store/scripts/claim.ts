/**
 * The one rule of claiming work, as a chunk of Lua shared by `claimWork` (the Dispatcher's rounds,
 * scripts/dispatch.ts) and commitFlow's "C" (the claims a commit makes for its own flow,
 * scripts/flow.ts), so both count slots, honour avoid marks and take turns alike
 * (docs/dispatch.md, "Fairness"):
 *
 *   claimFromQueues(queues, runners, limit, ctxCap, total, flows, now) → claims, drained
 *
 * `runners[r]` is `{ id, slots (its slot set's key), free, claimed = {} }`; `queues[q]` is
 * `{ key, band (its priority), flow, cap (the flow's max_parallel, 0: none), serving (positions in
 * runners), pos }`, in turn order; `limit` the most to claim; `ctxCap` the context's
 * max_inflight (nil: none) with `total` the attempts its runners hold; `flows` the attempts held
 * per flow (read when a queue has a cap); `now` a claimed slot's score.
 * Queues of a higher priority are served first; within one priority, each pass gives every queue
 * still able to take work an equal share of what is left (at least one), in turn order, until the
 * room or the queues run out. An item goes to the serving runner with the most free slots, except
 * that a retry marked `|a<id>` goes to runner <id> only when no other runner has room. Each
 * runner's claimed items are added to its slot set (one ZADD a runner).
 * Returns `claims`, a flat list {runner position, work item (the avoid mark stripped), queue
 * position, …}, and `drained`, the positions of the queues found empty.
 * Commands: one LPOP per queue per pass that takes from it, one ZADD per runner given work.
 */
export const CLAIM_FROM_QUEUES = `
local function claimFromQueues(queues, runners, limit, ctxCap, total, flows, now)
  local function room(e)
    local r = 0
    for _, s in ipairs(e.serving) do r = r + runners[s].free end
    if e.cap > 0 then r = math.min(r, e.cap - (flows[e.flow] or 0)) end
    if ctxCap then r = math.min(r, ctxCap - total) end
    return math.min(r, limit)
  end
  local function place(e, entry, claims)
    local item, avoid = string.match(entry, "^(.*)|a(%d+)$")
    if not item then item = entry end
    local best, fallback
    for _, r in ipairs(e.serving) do
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
    run.claimed[#run.claimed + 1] = now
    run.claimed[#run.claimed + 1] = item
    flows[e.flow] = (flows[e.flow] or 0) + 1
    total = total + 1
    limit = limit - 1
    claims[#claims + 1] = best
    claims[#claims + 1] = item
    claims[#claims + 1] = e.pos
  end
  local claims, drained = {}, {}
  local q = 1
  while q <= #queues and limit > 0 do
    local last = q
    while last < #queues and queues[last + 1].band == queues[q].band do last = last + 1 end
    local active = {}
    for k = q, last do active[#active + 1] = queues[k] end
    while #active > 0 and limit > 0 do
      -- What the pass hands out: the free slots of the runners serving its queues, within limits.
      local seen, avail = {}, 0
      for _, e in ipairs(active) do
        for _, r in ipairs(e.serving) do
          if not seen[r] then seen[r] = true avail = avail + runners[r].free end
        end
      end
      avail = math.min(avail, limit)
      if ctxCap then avail = math.min(avail, ctxCap - total) end
      if avail <= 0 then break end
      local share = math.max(1, math.floor(avail / #active))
      local still = {}
      for _, e in ipairs(active) do
        local n = math.min(share, room(e))
        if n > 0 then
          local taken = redis.call("LPOP", e.key, n) or {}
          for _, entry in ipairs(taken) do place(e, entry, claims) end
          if #taken < n then drained[#drained + 1] = e.pos else still[#still + 1] = e end
        end
      end
      active = still
    end
    q = last + 1
  end
  for r = 1, #runners do
    if #runners[r].claimed > 0 then redis.call("ZADD", runners[r].slots, unpack(runners[r].claimed)) end
  end
  return claims, drained
end`;
