import {
  flowFigures,
  jobKey,
  messageId,
  nearestDeadline,
  type FlowEffect,
  type FlowState,
  type JobState,
} from "../flow/index.js";
import {
  deadLetterIds,
  deadlineMember as ownerMember,
  inboxEntry,
  workItem,
  type DeadlineOwner,
  type Keys,
} from "../keys.js";
import type { DeadLetter, Log, Message } from "../model/index.js";
import { encodePairs } from "./codec.js";
import { codecs } from "./layouts.js";
import { readyQueueOf, type ReadyQueue } from "./ready-queue.js";
import { ScriptKeys } from "./script.js";
import { DEAD_LETTERS_MAX } from "./scripts/dead-letter-cap.js";
import { dispatchMessage, resultMessage } from "./flow-records.js";

/** One applied transition: the state after it, its effects, and logs that came with it. */
export interface CommitStep {
  state: FlowState;
  effects: FlowEffect[];
  /** Log lines a result brought along, for the job's current message. */
  logs?: { job: number; lines: Log[] };
}

/** What `commitFlow` runs, and what it leaves for dispatch to do. */
export interface CommitPlan {
  keys: string[];
  args: string[];
  /** The messages it creates: job attempts (queued for runners) and a flow's result (in its caller's inbox). */
  messages: Message[];
  /** Sections in step order; a skipped section means that step was already written. */
  sections: number;
  /** The flow's queues it puts job attempts in: the context's dispatcher has work there. */
  queued: ReadyQueue[];
  /** The runners whose slots it frees: work waiting for them may go now. */
  freed: number[];
  /** The work items whose slots it frees (what the dispatcher need not mark delivered any more). */
  released?: string[];
  /** It puts a flow's result on msg_out, for the relay to POST to its caller's https addresses. */
  notifies: boolean;
}

/**
 * An operation, and whether it can guard its step: a write that changes something only the
 * first time it runs (an HSET adding a field, an HDEL removing one). The lower the number, the
 * surer: 1 the flow's own lifecycle fields (started_at, ended_at, a re-run's clearing of
 * ended_at), 2 a new message, 3 a job's ended_at.
 */
type Op = ["H" | "D" | "P" | "Z" | "R" | "L" | "X" | "E", string, string[], (1 | 2 | 3)?];

/** Who a flow is in the context's deadline set: the flow, or the job that runs alone. */
export function deadlineOwner(state: FlowState): DeadlineOwner {
  return state.id === 0 ? { callerId: state.callerId, jobId: state.order[0] as number } : { flowId: state.id };
}

function deadlineMember(state: FlowState): string {
  return ownerMember(deadlineOwner(state));
}

/**
 * The work item of a job's attempt, as held in a runner's slots; queued with `avoidRunner`, the
 * runner a retry would rather not go back to.
 */
function attemptItem(keys: Keys, state: FlowState, job: JobState, attempt: number, avoidRunner?: number): string {
  const messageKey = keys.message(state.contextId, state.callerId, messageId(job, attempt));
  return workItem({ messageKey, flowId: state.id, jobId: job.id, attempt }, avoidRunner);
}

/**
 * Turns applied transitions into one `commitFlow` call: per step a section, guarded by a write
 * that changes something only the first time (a job's ended_at, a new message, the flow's
 * started_at or ended_at, a re-run clearing ended_at), so a step written once is never written
 * twice, whether the transition was replayed or the script call itself was retried. Only what
 * changed is written: an ended job's status, result and end (its message's final status is read
 * from it), the messages of newly dispatched jobs (their work items queued by script type, or for
 * the runner a job is pinned to), the freeing of the slot an ended attempt held, the flow's status.
 * Statuses in between (waiting, started) live in the Durable Object, not in Redis.
 * `deadLettersMax` is the deployment's cap on a context's dead letters (DEAD_LETTERS_MAX).
 */
export function planCommit(
  keys: Keys,
  steps: CommitStep[],
  now: number,
  deadLettersMax: number = DEAD_LETTERS_MAX,
): CommitPlan {
  const scriptKeys = new ScriptKeys();
  const at = (key: string) => String(scriptKeys.at(key));
  const args: string[] = [];
  const messages: Message[] = [];
  const secs = Math.floor(now / 1000);
  let sections = 0;
  /** The queues this batch puts attempts in, by key. */
  const ready = new Map<string, ReadyQueue>();
  let notifies = false;
  /**
   * Slots freed, by slot set. Freeing is idempotent (a ZREM), so the frees of the whole batch go
   * into one unguarded section at its end: one command per runner, however many attempts ended.
   */
  const frees = new Map<string, { runner: number; items: string[] }>();

  for (const step of steps) {
    const { state } = step;
    const ctx = state.contextId;
    const flowKey = keys.flow(ctx, state.id);
    const standalone = state.id === 0;
    const ops: Op[] = [];
    /** Work items by queue, and results to POST to the caller (onto msg_out). */
    const queued = new Map<string, string[]>();
    const posted: string[] = [];
    /**
     * The flow's deadlines start (a start, a re-run): its nearest goes into the context's
     * deadline set, and the context into the sweep's due set no later than then (an earlier due
     * time stands). Both in the commit itself, so the sweep, the backstop of the flow's own
     * alarm, knows of a started flow whatever becomes of the object that started it.
     */
    const deadlinesStart = () => {
      const due = nearestDeadline(state);
      if (!due) return;
      ops.push(["Z", keys.deadlines(ctx), [String(due.at), deadlineMember(state)]]);
      ops.push(["Z", keys.sweepDue(), ["LT", String(due.at), String(ctx)]]);
    };
    /** Frees the slot an attempt held at `runner`. */
    const release = (job: JobState, attempt: number, runner: number | undefined) => {
      if (runner === undefined || attempt === 0) return;
      const key = keys.runnerSlots(ctx, runner);
      const entry = frees.get(key) ?? { runner, items: [] };
      entry.items.push(attemptItem(keys, state, job, attempt));
      frees.set(key, entry);
    };

    for (const effect of step.effects) {
      switch (effect.type) {
        case "flowStarted": {
          if (!standalone) {
            ops.push([
              "H",
              flowKey,
              encodePairs(codecs.flow, { status: "started", started_at: secs, updated_at: secs }),
              1,
            ]);
            ops.push(["R", keys.flowsByStatus(ctx, "dispatched"), [String(state.id)]]);
            ops.push(["Z", keys.flowsByStatus(ctx, "started"), [String(state.id), String(state.id)]]);
          }
          deadlinesStart();
          break;
        }
        case "dispatch": {
          const job = state.jobs[effect.job] as JobState;
          const message = dispatchMessage(state, job, effect.attempt, now);
          const key = keys.message(ctx, state.callerId, message.id);
          ops.push(["H", key, encodePairs(codecs.message, message), 2]);
          messages.push(message);
          const queue = readyQueueOf(keys, state, job.spec);
          queued.set(queue.key, [
            ...(queued.get(queue.key) ?? []),
            attemptItem(keys, state, job, effect.attempt, job.previousRunner),
          ]);
          ready.set(queue.key, queue);
          break;
        }
        case "attemptFailed": {
          const job = state.jobs[effect.job] as JobState;
          // The failed attempt's runner is the one the retry will avoid.
          release(job, effect.attempt, job.previousRunner);
          const messageKey = keys.message(ctx, state.callerId, messageId(job, effect.attempt));
          ops.push([
            "H",
            messageKey,
            encodePairs(codecs.message, {
              status: "error",
              ended_at: secs,
              updated_at: secs,
              runner_id: job.previousRunner,
            }),
            3,
          ]);
          if (step.logs?.job === job.id && step.logs.lines.length > 0)
            ops.push(["L", messageKey, [JSON.stringify(step.logs.lines)]]);
          break;
        }
        case "deadLetter": {
          const job = state.jobs[effect.job] as JobState;
          const entry: DeadLetter = {
            id: deadLetterIds.job(state.id, job.id, job.attempt),
            kind: effect.kind,
            context_id: ctx,
            flow_id: state.id,
            job_id: job.id,
            job_key: jobKey(job),
            caller_id: state.callerId,
            ...(job.attempt > 0 ? { message_id: messageId(job, job.attempt) } : {}),
            attempts: job.attempt - job.attemptFloor,
            reason: effect.reason,
            at: secs,
          };
          // Kept within the context's cap (scripts/dead-letter-cap.ts): only a batch that writes a
          // dead letter pays for reading the cap and the index's size.
          const where = [keys.deadLetterIndex(ctx), keys.context(ctx), keys.contextCounters(ctx)].map(at);
          ops.push([
            "X",
            keys.deadLetters(ctx),
            [...where, entry.id, JSON.stringify(entry), String(now), String(deadLettersMax)],
          ]);
          break;
        }
        case "flowRerun": {
          if (!standalone) {
            ops.push(["D", flowKey, ["ended_at", "error"], 1]);
            ops.push(["H", flowKey, encodePairs(codecs.flow, { status: "started", updated_at: secs })]);
            ops.push(["R", keys.flowsByStatus(ctx, "error"), [String(state.id)]]);
            ops.push(["Z", keys.flowsByStatus(ctx, "started"), [String(state.id), String(state.id)]]);
          }
          // Running again: nothing of it may be removed now (retention.ts, the purge's guard).
          ops.push(["R", keys.ended(ctx, "error"), [deadlineMember(state)]]);
          for (const id of effect.jobs) {
            const job = state.jobs[id] as JobState;
            const jobHash = keys.job(ctx, state.callerId, id);
            // The last run's final message took its end from the job, which is about to forget
            // it: the end is written into the message first (if the job ended after an attempt).
            const last = job.pastMessages?.at(-1)?.[1];
            if (last !== undefined) ops.push(["E", keys.message(ctx, state.callerId, last), [at(jobHash)]]);
            ops.push([
              "H",
              jobHash,
              encodePairs(codecs.job, {
                status: job.status,
                message_base: job.messageBase,
                attempt_floor: job.attemptFloor,
                ...(job.pastMessages ? { past_messages: job.pastMessages } : {}),
                updated_at: secs,
              }),
            ]);
            ops.push(["D", jobHash, ["error", "ended_at", "last_runner_id"]]);
          }
          deadlinesStart();
          break;
        }
        case "cancelJob":
          break; // carried out by the shell after the commit: a signed cancel to the runner
        case "jobEnded": {
          const job = state.jobs[effect.job] as JobState;
          release(job, job.attempt, job.delivery?.runnerId);
          // The job alone is written: its last attempt's message takes its final status, end and
          // runner from it when read (messageEnd), which saves a write per job. ended_at is new
          // on the first write of this outcome, and only then (a re-run deletes it).
          ops.push([
            "H",
            keys.job(ctx, state.callerId, job.id),
            encodePairs(codecs.job, {
              status: job.status,
              result: job.result ?? {},
              error: job.error,
              attempt: job.attempt,
              latency_ms: job.latencyMs,
              duration_ms: job.durationMs,
              ended_at: secs,
              last_runner_id: job.delivery?.runnerId,
              updated_at: secs,
            }),
            3,
          ]);
          if (job.attempt > 0 && step.logs?.job === job.id && step.logs.lines.length > 0)
            ops.push([
              "L",
              keys.message(ctx, state.callerId, messageId(job, job.attempt)),
              [JSON.stringify(step.logs.lines)],
            ]);
          break;
        }
        case "flowEnded": {
          if (!standalone) {
            // No result: the jobs' records hold it (a flow's view gathers it), never copied here.
            const final = {
              status: state.status,
              error: state.error,
              ended_at: secs,
              updated_at: secs,
            };
            ops.push(["H", flowKey, encodePairs(codecs.flow, final), 1]);
            ops.push([
              "R",
              keys.flowsByStatus(ctx, state.startedAt === undefined ? "dispatched" : "started"),
              [String(state.id)],
            ]);
            ops.push(["Z", keys.flowsByStatus(ctx, state.status), [String(state.id), String(state.id)]]);
          }
          ops.push(["R", keys.deadlines(ctx), [deadlineMember(state)]]);
          // Kept until the context's retention window for how it ended has passed (retention.ts).
          if (state.status === "finished" || state.status === "error")
            ops.push(["Z", keys.ended(ctx, state.status), [String(now), deadlineMember(state)]]);
          // The caller hears how it ended: a result message, put in its inbox right here (once:
          // the section is guarded). Only a caller with https addresses to POST it to costs the
          // relay anything: the message goes onto msg_out too, which the relay only POSTs.
          const report = resultMessage(state, now);
          const key = keys.message(ctx, state.callerId, report.id);
          ops.push(["H", key, encodePairs(codecs.message, report), 2]);
          ops.push(["P", keys.msgIn(ctx, state.callerId), [key]]);
          ops.push(["Z", keys.inboxDue(ctx), [String(now), inboxEntry(state.callerId, key)]]);
          messages.push(report);
          if (state.notifyHttps !== false) {
            posted.push(key);
            notifies = true;
          }
          // What the run adds to the context's figures (/metrics), once: the section is guarded.
          const figures = flowFigures(state);
          if (figures) ops.push(["P", keys.contextFigures(ctx), [JSON.stringify(figures)]]);
          break;
        }
      }
    }
    for (const [queue, items] of queued) ops.push(["P", queue, items]);
    if (posted.length > 0) ops.push(["P", keys.msgOut(ctx), posted]);
    if (
      step.logs &&
      !step.effects.some((e) => (e.type === "jobEnded" || e.type === "attemptFailed") && e.job === step.logs?.job)
    ) {
      const job = state.jobs[step.logs.job] as JobState;
      if (job.attempt > 0 && step.logs.lines.length > 0) {
        ops.push([
          "L",
          keys.message(ctx, state.callerId, messageId(job, job.attempt)),
          [JSON.stringify(step.logs.lines)],
        ]);
      }
    }
    if (ops.length === 0) continue;
    // The step's guard: a write that changes something only the first time goes first, so a step
    // that was written before (a retried script call, a replayed transition) is skipped whole.
    let guard = -1;
    ops.forEach((op, i) => {
      if (op[3] !== undefined && (guard < 0 || op[3] < (ops[guard]?.[3] ?? 4))) guard = i;
    });
    if (guard > 0) ops.unshift(...ops.splice(guard, 1));
    sections++;
    args.push(guard >= 0 ? "1" : "0", String(ops.length));
    for (const [op, key, values] of ops) args.push(op, at(key), String(values.length), ...values);
  }
  if (frees.size > 0) {
    sections++;
    args.push("0", String(frees.size));
    for (const [key, { items }] of frees) args.push("R", at(key), String(items.length), ...items);
  }
  return {
    keys: scriptKeys.list,
    args,
    messages,
    sections,
    queued: [...ready.values()],
    freed: [...frees.values()].map((f) => f.runner),
    released: [...frees.values()].flatMap((f) => f.items),
    notifies,
  };
}
