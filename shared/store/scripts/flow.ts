import { LuaScript } from "../script.js";
import { CLAIM_FROM_QUEUES } from "./claim.js";
import { KEEP_DEAD_LETTER } from "./dead-letter-cap.js";
import { SLICED } from "./sliced.js";

/**
 * Scripts of the flow lifecycle. Every key a script touches is in KEYS, all in the context's
 * slot. Costs are in Redis commands (INFO commandstats counts the script call and each
 * redis.call), since that is what a deployment pays for.
 */

/**
 * reserveFlow: allocate a flow id, a block of job ids and a block of message ids for one
 * submission, or find the reservation an Idempotency-Key already made. The key keeps the whole
 * reservation and the request's digest, so a submission retried after an answer was lost (or
 * after storage timed out with the outcome unknown) finishes with the very same ids.
 *   KEYS[1]  the context's id counters (hash)
 *   KEYS[2]  the idempotency key (when ARGV[7] is not empty)
 *   ARGV[1]  flow id chosen by the caller, or "" to allocate
 *   ARGV[2]  the counter field of the caller's jobs (Keys.jobCounter)
 *   ARGV[3]  how many job ids to allocate
 *   ARGV[4]  the highest job id the caller chose (0 if none): allocation starts above it
 *   ARGV[5]  how many message ids to reserve
 *   ARGV[6]  idempotency TTL in seconds
 *   ARGV[7]  the request's digest (with KEYS[2])
 *   ARGV[8]  the counter field of the caller's messages (Keys.messageCounter)
 *   ARGV[9]  the signature nonce's token, or "" when the request's nonce was spent elsewhere;
 *            with a token, KEYS[#KEYS] is the nonce's key and ARGV[10] its TTL in seconds
 *   ARGV[11] "1" to read the push runners the context's dispatcher named (the context hash's
 *            `push_runners`) for the claims of the flow's first commit; the context hash is
 *            then the last key but the nonce's
 * The nonce is spent here so that a signed submission costs one storage command less; the
 * token is this call's own, so a call retried after it took effect still finds it fresh.
 * Returns {0, flowId, firstJobId, firstMessageId, named runners ("" when not asked or none)}, or
 * {1, "<flow>:<job>:<message>:<digest>"} when the Idempotency-Key was seen before:
 * nothing is allocated then; {2} when the nonce was used before (nothing done).
 */
export const reserveFlow = new LuaScript(
  "reserveFlow",
  `if ARGV[9] ~= "" then
  local used = redis.call("SET", KEYS[#KEYS], ARGV[9], "NX", "GET", "EX", tonumber(ARGV[10]))
  if used and used ~= ARGV[9] then return {2} end
end
local idempotent = ARGV[7] ~= ""
if idempotent then
  local seen = redis.call("GET", KEYS[2])
  if seen then return {1, seen} end
end
local flowId
if ARGV[1] == "" then
  flowId = redis.call("HINCRBY", KEYS[1], "flow", 1)
else
  flowId = tonumber(ARGV[1])
  local cur = tonumber(redis.call("HGET", KEYS[1], "flow") or "0")
  if flowId > cur then redis.call("HSET", KEYS[1], "flow", flowId) end
end
local jobField = ARGV[2]
local count = tonumber(ARGV[3])
local floor = tonumber(ARGV[4])
local base = tonumber(redis.call("HGET", KEYS[1], jobField) or "0")
if floor > base then base = floor end
redis.call("HSET", KEYS[1], jobField, base + count)
local lastMessage = redis.call("HINCRBY", KEYS[1], ARGV[8], tonumber(ARGV[5]))
local firstMessage = lastMessage - tonumber(ARGV[5]) + 1
if idempotent then
  redis.call("SET", KEYS[2], flowId .. ":" .. (base + 1) .. ":" .. firstMessage .. ":" .. ARGV[7], "EX", tonumber(ARGV[6]))
end
local named = ""
if ARGV[11] == "1" then
  named = redis.call("HGET", KEYS[ARGV[9] ~= "" and #KEYS - 1 or #KEYS], "push_runners") or ""
end
return {0, flowId, base + 1, firstMessage, named}`,
);

/**
 * The interpreter of a commit plan's sections (see commitFlow), as a chunk of Lua: it reads
 * sections from ARGV[i] on, with the key positions they name offset by KO, and leaves the
 * sections it skipped in `skipped`. Shared by commitFlow and createFlow. A dead letter ("X") is
 * kept by the same Lua as addDeadLetter's, so both writers enforce the context's cap alike.
 */
const COMMIT_SECTIONS = `${KEEP_DEAD_LETTER}
${CLAIM_FROM_QUEUES}
local COMMANDS = { H = "HSET", D = "HDEL", P = "RPUSH", Z = "ZADD", R = "ZREM" }
local LOG_CAP = 262144
local skipped = {}
local section = 0
-- What claims ("C") found and took: the context's dispatch_waiting (read once), the work
-- claimed, and candidate runners that are gone or no longer push runners of the queue's kind.
local claimOpen, claimWaiting
local claimed, invalid = {}, {}
while i <= #ARGV do
  local guarded = ARGV[i] == "1"
  local ops = tonumber(ARGV[i + 1])
  i = i + 2
  section = section + 1
  local skip = false
  for k = 1, ops do
    local op, key, n = ARGV[i], KEYS[KO + tonumber(ARGV[i + 1])], tonumber(ARGV[i + 2])
    local first = i + 3
    i = first + n
    if not skip then
      if op == "L" then
        local current = redis.call("HGET", key, "logs")
        local add = ARGV[first]
        if not current or current == "[]" then current = add
        elseif #current + #add <= LOG_CAP then current = string.sub(current, 1, -2) .. "," .. string.sub(add, 2) end
        redis.call("HSET", key, "logs", current)
      elseif op == "A" then
        local field, add = ARGV[first], ARGV[first + 1]
        local current = redis.call("HGET", key, field)
        if not current or current == "[]" then current = add
        elseif add ~= "[]" then current = string.sub(current, 1, -2) .. "," .. string.sub(add, 2) end
        redis.call("HSET", key, field, current)
      elseif op == "E" then
        if redis.call("HEXISTS", key, "ended_at") == 0 and redis.call("EXISTS", key) == 1 then
          local job = redis.call("HMGET", KEYS[KO + tonumber(ARGV[first])], "status", "ended_at", "last_runner_id")
          if job[2] then
            local final = { "status", job[1] == "finished" and "processed" or "error", "ended_at", job[2], "updated_at", job[2] }
            if job[3] then final[#final + 1] = "runner_id" final[#final + 1] = job[3] end
            redis.call("HSET", key, unpack(final))
          end
        end
      elseif op == "C" then
        local arg = function(j) return ARGV[first + j] end
        if claimOpen == nil then
          local c = redis.call("HMGET", KEYS[KO + tonumber(arg(0))], "paused", "max_inflight", "dispatch_waiting")
          claimWaiting = c[3] or ""
          claimOpen = c[1] ~= "true" and not c[2]
        end
        if claimOpen and (claimWaiting == "none" or claimWaiting == arg(2)) then
          -- The candidates, as the dispatcher's claims see runners: their free slots.
          local kind, runners, serving = arg(4), {}, {}
          for j = 6, n - 3, 3 do
            local id, hash, slots = arg(j), KEYS[KO + tonumber(arg(j + 1))], KEYS[KO + tonumber(arg(j + 2))]
            local r = redis.call("HMGET", hash, "concurrency", "script_types", "address", "deliveries_per_post", "pubkey")
            if not r[1] or not r[3] or r[3] == "" or (kind ~= "" and not string.find(r[2] or "", '"' .. kind .. '"', 1, true)) then
              invalid[#invalid + 1] = id
            else
              local free = math.max(0, tonumber(r[1]) - redis.call("ZCARD", slots))
              runners[#runners + 1] = { id = id, slots = slots, free = free, claimed = {}, record = r }
              serving[#serving + 1] = #runners
            end
          end
          local queue = { key = key, band = "0", flow = arg(2), cap = 0, serving = serving, pos = 1 }
          local got, empty = claimFromQueues({ queue }, runners, tonumber(arg(3)), nil, 0, {}, arg(1))
          local items = {}
          for c = 1, #got, 3 do
            local r = got[c]
            items[r] = items[r] or {}
            items[r][#items[r] + 1] = got[c + 1]
          end
          for r, run in ipairs(runners) do
            if items[r] then
              local rec = run.record
              claimed[#claimed + 1] = { arg(5), #empty, run.free <= 0 and 1 or 0, run.id, rec[3], rec[4] or "1", rec[5] or "", items[r] }
            end
          end
        end
      elseif op == "U" then
        -- The unwinding's guard: the flow has not ended, and begins to unwind only now.
        local fresh = redis.call("HEXISTS", key, "ended_at") == 0 and redis.call("HSETNX", key, "compensating_at", ARGV[first]) == 1
        if k == 1 and guarded and not fresh then
          skip = true
          skipped[#skipped + 1] = section
        end
      elseif op == "X" then
        local at = function(j) return KEYS[KO + tonumber(ARGV[first + j])] end
        keepDeadLetter(key, at(0), at(1), at(2), ARGV[first + 3], ARGV[first + 4], ARGV[first + 5], ARGV[first + 6])
      else
        local result = sliced(COMMANDS[op], key, ARGV, first, first + n - 1)
        if k == 1 and guarded and result == 0 then
          skip = true
          skipped[#skipped + 1] = section
        end
      end
    end
  end
end`;

/**
 * createFlow: store a flow and all its jobs in one step, and with them (when a flow is submitted
 * with `start`) the sections of its first commit: a submission that starts its flow at once is
 * one script call, not a creation and then a commit.
 *   KEYS[1]  the flow hash            KEYS[2]  the flow index          KEYS[3]  the status index
 *   KEYS[4]  the job index            KEYS[5 .. 4 + J]  the job hashes, in order
 *   KEYS[5 + J ..]  the keys of the commit's sections (their positions count from 1 there)
 *   ARGV[1]  flow id   ARGV[2]  J, the number of jobs
 *   ARGV[3]  comma-separated positions (1-based) of jobs whose id the caller chose
 *   ARGV[4]  this creation's own token, kept in the flow hash's `_op`: the flow's incarnation
 *            (its FlowCoordinator keeps it too), and with a commit, what tells this very
 *            creation run again (created 0) from another flow under the id
 *   ARGV[5]  n, the number of flow fields, then n field/value pairs
 *   then for each job: its index member, m, and m field/value pairs
 *   then the commit's sections, as commitFlow reads them (none: a creation alone)
 * Returns -1 when another flow holds the id (nothing written), -(1 + k) when job k's id is
 * taken; else {created, skipped, waiting, claimed, invalid}: created 1 when it stored the flow
 * now, 0 when this creation had been stored before (a retried call after an unknown outcome:
 * only the commit's sections are run, guarded as always), then the commit's sections that were
 * skipped as written before, and what its claims did (as commitFlow returns them).
 */
export const createFlow = new LuaScript(
  "createFlow",
  `${SLICED}
local J = tonumber(ARGV[2])
local created = 1
if redis.call("EXISTS", KEYS[1]) == 1 then
  if redis.call("HGET", KEYS[1], "_op") ~= ARGV[4] then return -1 end
  created = 0
end
local n = tonumber(ARGV[5])
local i = 6 + 2 * n
if created == 1 then
  for pos in string.gmatch(ARGV[3], "%d+") do
    if redis.call("EXISTS", KEYS[4 + tonumber(pos)]) == 1 then return -1 - tonumber(pos) end
  end
  redis.call("HSET", KEYS[1], unpack(ARGV, 6, 5 + 2 * n))
  redis.call("HSET", KEYS[1], "_op", ARGV[4])
  redis.call("ZADD", KEYS[2], ARGV[1], ARGV[1])
  redis.call("ZADD", KEYS[3], ARGV[1], ARGV[1])
  local members = {}
  for k = 5, 4 + J do
    local member = ARGV[i]
    local m = tonumber(ARGV[i + 1])
    redis.call("HSET", KEYS[k], unpack(ARGV, i + 2, i + 1 + 2 * m))
    members[#members + 1] = string.match(member, ":(%d+)$")
    members[#members + 1] = member
    i = i + 2 + 2 * m
  end
  sliced("ZADD", KEYS[4], members, 1, #members)
else
  for k = 1, J do i = i + 2 + 2 * tonumber(ARGV[i + 1]) end
end
local KO = 4 + J
${COMMIT_SECTIONS}
return {created, skipped, claimWaiting or "", claimed, invalid}`,
);

/**
 * commitFlow: write one batch of a flow's transitions, all or nothing.
 *
 * A small interpreter on purpose. The FlowCoordinator applies the events that arrived together
 * (a burst of results, a result and the dispatches it unlocks, the flow's end) to the pure
 * machine, and `planCommit` (flow-plan.ts) turns every transition's effects into a *section* of
 * operations. One call writes the whole batch: one round trip and one EVALSHA per batch instead
 * of one per transition. Measured in the 100-job layered DAG (test/e2e/flow-delivery.test.ts):
 * some 27 commitFlow calls write its 202 transitions (start, 100 dispatches, 100 ends, end), for
 * about 5.35 commands per job in all; a script per transition would make at least 202 calls,
 * 1.75 more commands per job. The cost of the design is that what a transition
 * writes is read in flow-plan.ts, not here.
 *
 * What the operations write (the section that writes them, from flow-plan.ts):
 *   "H" HSET   a job's final status, result, end and last runner, a failed attempt's message
 *              (error, its end), the flow's status, result and times, a new message (a job's
 *              attempt, a flow's result mail). The message of a job's last attempt is not
 *              written at the job's end: reads take its final status from the job
 *   "D" HDEL   fields a re-run clears (the flow's ended_at and error, a job's error)
 *   "P" RPUSH  work items onto a ready queue (a dispatch), a flow's result onto its caller's
 *              msg_in (and onto msg_out when the relay is to POST it), the context's figures
 *   "Z" ZADD   status indexes, the context's deadline set
 *   "R" ZREM   status indexes, the deadline set, and a runner's slot (an attempt ended)
 *   "L"        append log lines to a message's JSON `logs` field (capped at 256 KiB)
 *   "A"        append a JSON list's items to a hash field holding a JSON list (its arguments:
 *              the field, the list): the ids of jobs that joined a running flow, onto the
 *              flow's `jobs`, so a growth writes what it adds, not the flow's whole list. Not a
 *              guard: its section's new job records guard it
 *   "E"        a re-run's copy of a job's end into its last message (status processed or
 *              error, ended_at, runner_id), before the job forgets it; nothing if that message
 *              has its own end or is gone. Its argument: the key position of the job hash
 *   "C"        claim: give work just queued on the flow's own queue (the op's key) to a push
 *              runner with free slots, as a dispatcher's claim would (docs/dispatch.md, "Claims
 *              in the commit"). Only while the context's dispatch is not paused, it has no
 *              max_inflight, and its dispatcher's ring holds no other flow's queue (the context
 *              hash's `dispatch_waiting` is "none" or this flow's id; unset: not known, no claim).
 *              Its arguments: the context hash's key position, now (the claim's slot score), the
 *              flow id, the most to take, the queue's script type ("" when pinned to a runner),
 *              a tag, then per candidate runner its id and the key positions of its hash and
 *              slot set. A candidate that is gone, pulls, or does not take the script type is
 *              skipped (and named in `invalid`); the others' free slots take items from the front
 *              of the queue by the dispatcher's own rule (claimFromQueues, scripts/claim.ts: the
 *              runner with the most room first; a retry goes back to the runner it avoids only
 *              when no other has room). Never put in a pending plan: a commit run
 *              again after an unknown outcome claims nothing, its queues go to the dispatcher
 *   "U"        the guard of a flow that begins to unwind: HSETNX its compensating_at (the
 *              argument), only if the flow hash has no ended_at; 0 when it has either. An ended
 *              flow never unwinds: a batch planned on a memory that missed the flow's end (which
 *              storage has) must not write "compensating" over it, which a guard on
 *              compensating_at alone allowed (a flow left compensating with an ended_at, stuck)
 *   "X"        keep a dead letter (a job out of retries) within the context's cap: HSETNX into
 *              the dead letters hash, ZADD to their index, and past the cap (the context hash's
 *              `retention.dead_letters`, else the deployment's) the oldest dropped from both and
 *              counted in the context's counters (`dead_letters_dropped`). Its arguments: the
 *              key positions of the index, the context hash and the counters, then id, entry
 *              (JSON), score (epoch ms), the deployment's cap (scripts/dead-letter-cap.ts)
 *
 * Idempotent, so it can be run again after an unknown outcome (see docs/architecture.md): a
 * guarded section starts with a write that changes something only the first time (an HSET
 * adding a final-state field such as a job's ended_at or a new message, an HDEL of a field a re-run
 * clears); when that write returns 0 the transition was written before and the rest of the
 * section is skipped. Unguarded sections hold only writes that are harmless twice (freeing
 * slots: ZREM).
 * A commit is written only into the flow it was planned for: when ARGV[1] is "T", KEYS[1] is
 * the flow's hash (a job's, outside any flow) and ARGV[2] its incarnation token; a hash that is
 * gone (Redis wiped or replaced, the flow deleted) or holds another token writes nothing and
 * returns -1: written anyway, the batch would leave a partial record of nothing. One command.
 *   KEYS     every key the batch touches (after the flow's hash, with "T")
 *   ARGV     sections: guarded ("1"/"0"), number of operations, then the operations: op (above),
 *            key position in KEYS, argument count, arguments
 * Returns -1 (above), or {skipped, waiting, claimed, invalid}: the positions (1-based) of the sections that were
 * skipped (empty when all applied); the context's `dispatch_waiting` as a claim read it ("" when
 * no claim ran, or it is unset); per runner given work by a claim {tag, drained (1: the queue ran
 * empty), full (1: the runner has no free slot left), runner id, address, deliveries_per_post,
 * pubkey, {items}}; the candidates skipped.
 */
export const commitFlow = new LuaScript(
  "commitFlow",
  `${SLICED}
local i = 1
local KO = 0
if ARGV[1] == "T" then
  if redis.call("HGET", KEYS[1], "_op") ~= ARGV[2] then return -1 end
  i, KO = 3, 1
end
${COMMIT_SECTIONS}
return {skipped, claimWaiting or "", claimed, invalid}`,
);

/**
 * relayClaim: take up to N messages from msg_out into the in-flight set in one step, unless the
 * context's dispatch is paused (then nothing moves at all). First, messages whose delivery was
 * never settled in time (a relay that died, or could not reach storage to settle) go back to the
 * front of msg_out: the in-flight set loses nothing.
 *   KEYS[1]  msg_out   KEYS[2]  inflight   KEYS[3]  the context hash
 *   ARGV[1]  N         ARGV[2]  score: when the delivery must be settled (epoch ms)
 *   ARGV[3]  now (epoch ms)
 * Returns the message keys taken (none while paused).
 */
export const relayClaim = new LuaScript(
  "relayClaim",
  `if redis.call("HGET", KEYS[3], "paused") == "true" then return {} end
local stuck = redis.call("ZRANGEBYSCORE", KEYS[2], "-inf", ARGV[3], "LIMIT", 0, 100)
if #stuck > 0 then
  redis.call("ZREM", KEYS[2], unpack(stuck))
  redis.call("LPUSH", KEYS[1], unpack(stuck))
end
local taken = redis.call("LPOP", KEYS[1], tonumber(ARGV[1]))
if not taken then return {} end
local scored = {}
for _, key in ipairs(taken) do
  scored[#scored + 1] = ARGV[2]
  scored[#scored + 1] = key
end
redis.call("ZADD", KEYS[2], unpack(scored))
return taken`,
);

/**
 * relaySettle: end the relay's hold on messages from msg_out: those delivered leave the
 * in-flight set, those that could not be delivered go back to the front of msg_out. A message
 * goes back only if it is still this relay's (its in-flight score is the claim's): a late settle
 * must not return a message another relay has taken since.
 *   KEYS[1]  inflight   KEYS[2]  msg_out
 *   ARGV[1]  the claim's score
 *   ARGV[2..] groups: target ("D" delivered, "B" back to msg_out), count, message keys
 * Returns the number of messages settled.
 */
export const relaySettle = new LuaScript(
  "relaySettle",
  `local settled = 0
local i = 2
while i <= #ARGV do
  local target, n = ARGV[i], tonumber(ARGV[i + 1])
  local first = i + 2
  i = first + n
  if target == "B" then
    local back = {}
    for k = first + n - 1, first, -1 do
      local score = redis.call("ZSCORE", KEYS[1], ARGV[k])
      if score and tonumber(score) == tonumber(ARGV[1]) then back[#back + 1] = ARGV[k] end
    end
    if #back > 0 then
      settled = settled + redis.call("ZREM", KEYS[1], unpack(back))
      redis.call("LPUSH", KEYS[2], unpack(back))
    end
  else
    settled = settled + redis.call("ZREM", KEYS[1], unpack(ARGV, first, first + n - 1))
  end
end
return settled`,
);
