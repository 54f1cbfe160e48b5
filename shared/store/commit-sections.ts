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
  deadlineMember,
  inboxEntry,
  waitMember,
  workItem,
  type DeadlineOwner,
  type Keys,
} from "../keys.js";
import { scriptTypeOf, type DeadLetter, type Log, type Message } from "../model/index.js";
import { encodePairs } from "./codec.js";
import { jobsAdded } from "./commit-growth.js";
import { dispatchMessage, resultMessage } from "./flow-records.js";
import { codecs } from "./layouts.js";
import { DISPATCHES_PER_PART, guardFirst, type Op, type SectionPart } from "./commit-calls.js";
import { compensatingOps, endedOps, endedSet, failureOps, rerunOps } from "./flow-lifecycle.js";
import { readyQueueOf, type ReadyQueue } from "./ready-queue.js";

export { DISPATCHES_PER_PART, type Op } from "./commit-calls.js";

/**
 * What each effect of a transition writes, as operations of the commit section that writes the
 * transition (see `commitFlow`'s header, shared/store/scripts/flow.ts, for what each operation
 * does in Redis). `planCommit` (flow-plan.ts) runs one `StepSection` per applied transition.
 */

/** One applied transition: the state after it, its effects, and logs that came with it. */
export interface CommitStep {
  state: FlowState;
  effects: FlowEffect[];
  /** Log lines a result brought along, for the job's current message. */
  logs?: { job: number; lines: Log[] };
}

/** What the sections of one batch gather beyond their operations, for the commit as a whole. */
export interface BatchOutput {
  /** The messages the batch creates: attempts (queued for runners) and results (in inboxes). */
  readonly messages: Message[];
  /** The queues the batch puts attempts in, by key. */
  readonly ready: Map<string, ReadyQueue>;
  /**
   * Slots freed, by slot set. Freeing is idempotent (a ZREM), so the frees of the whole batch go
   * into one unguarded section at its end: one command per runner, however many attempts ended.
   */
  readonly frees: Map<string, { runner: number; items: string[] }>;
  /** Whether a flow's result goes onto msg_out, for the relay to POST. */
  notifies: boolean;
  /** On a Redis Cluster: the earliest due time the batch's starts give the context's sweep. */
  sweepDue?: number;
}

/** Who a flow is in the context's deadline set: the flow, or the job that runs alone. */
export function deadlineOwner(state: FlowState): DeadlineOwner {
  return state.id === 0 ? { callerId: state.callerId, jobId: state.order[0] as number } : { flowId: state.id };
}

/**
 * The work item of a job's attempt, as held in a runner's slots; queued with `avoidRunner`, the
 * runner a retry would rather not go back to.
 */
function attemptItem(keys: Keys, state: FlowState, job: JobState, attempt: number, avoidRunner?: number): string {
  const messageKey = keys.message(state.contextId, state.callerId, messageId(job, attempt));
  return workItem({ messageKey, flowId: state.id, jobId: job.id, attempt }, avoidRunner);
}

/** A part of a section: its operations, and the work items its dispatches queue, by queue. */
interface Part {
  ops: Op[];
  queued: Map<string, string[]>;
  dispatches: number;
}

/**
 * The section of one transition: each effect adds its writes (`write`), then `close` adds what
 * the effects gathered (work items by queue, results to POST, log lines) and orders the
 * operations so that the surest guard goes first. A section of many dispatches comes in parts.
 */
export class StepSection {
  private readonly parts: Part[] = [{ ops: [], queued: new Map(), dispatches: 0 }];
  /** Results to POST to the caller (onto msg_out). */
  private readonly posted: string[] = [];
  /** Whether the step's log lines went onto a message already. */
  private logsWritten = false;
  private readonly ctx: number;
  private readonly secs: number;

  constructor(
    private readonly keys: Keys,
    private readonly step: CommitStep,
    private readonly now: number,
    private readonly deadLettersMax: number,
    private readonly out: BatchOutput,
  ) {
    this.ctx = step.state.contextId;
    this.secs = Math.floor(now / 1000);
  }

  private get state(): FlowState {
    return this.step.state;
  }

  private get standalone(): boolean {
    return this.state.id === 0;
  }

  private job(id: number): JobState {
    return this.state.jobs.job(id);
  }

  /** The part being written. */
  private get current(): Part {
    return this.parts[this.parts.length - 1] as Part;
  }

  /** The operations of the part being written. */
  private get ops(): Op[] {
    return this.current.ops;
  }

  /** Adds what one effect writes. */
  write(effect: FlowEffect): void {
    switch (effect.type) {
      case "flowStarted":
        return this.flowStarted();
      case "dispatch":
        return this.dispatch(effect.job, effect.attempt);
      case "attemptFailed":
        return this.attemptFailed(effect.job, effect.attempt);
      case "deadLetter":
        return this.deadLetter(effect);
      case "flowRerun":
        return this.flowRerun(effect);
      case "cancelJob":
        return; // carried out by the shell after the commit: a signed cancel to the runner
      case "jobEnded":
        return this.jobEnded(effect.job);
      case "flowCompensating":
        return this.flowCompensating();
      case "flowEnded":
        return this.flowEnded();
      case "waitStarted":
        return this.waitStarted(effect.job);
      case "sleepStarted":
      case "expand":
        return; // nothing in Redis: the deadline lives in the flow's object (a map's ids come next)
      case "jobsAdded":
        this.ops.push(...jobsAdded(this.keys, this.state, effect.jobs, this.now));
        return;
    }
  }

  /** A wait started: the context's index of waits for its event name and key gets it. */
  waitStarted(jobId: number): void {
    const job = this.job(jobId);
    const index = this.waitIndex(job);
    if (index) this.ops.push(["Z", index, [String(job.deadline?.at ?? this.now), waitMember(this.state.id, job.id)]]);
  }

  /** The index a wait is in, once it started (its key resolved); undefined for any other job. */
  private waitIndex(job: JobState): string | undefined {
    const wait = job.spec.wait;
    return wait && job.waitKey !== undefined ? this.keys.waits(this.ctx, wait.event, job.waitKey) : undefined;
  }

  /** The flow's status goes to started, and its deadlines start. */
  flowStarted(): void {
    const id = String(this.state.id);
    if (!this.standalone) {
      const started = encodePairs(codecs.flow, { status: "started", started_at: this.secs, updated_at: this.secs });
      this.ops.push(["H", this.keys.flow(this.ctx, this.state.id), started, 1]);
      this.ops.push(["R", this.keys.flowsByStatus(this.ctx, "dispatched"), [id]]);
      this.ops.push(["Z", this.keys.flowsByStatus(this.ctx, "started"), [id, id]]);
    }
    this.deadlinesStart();
  }

  /**
   * The flow's deadlines start (a start, a re-run): its nearest goes into the context's deadline
   * set, and the context into the sweep's due set no later than then (an earlier due time
   * stands). Both in the commit itself, so the sweep, the backstop of the flow's own alarm,
   * knows of a started flow whatever becomes of the object that started it. On a Redis Cluster
   * the due set is in another slot than the context: the plan carries the due time
   * (`CommitPlan.sweepDue`), written by a command of its own once the script is (flow-calls.ts).
   */
  private deadlinesStart(): void {
    const due = nearestDeadline(this.state);
    if (!due) return;
    this.ops.push(["Z", this.keys.deadlines(this.ctx), [String(due.at), deadlineMember(deadlineOwner(this.state))]]);
    if (this.keys.cluster) this.out.sweepDue = Math.min(this.out.sweepDue ?? Infinity, due.at);
    else this.ops.push(["Z", this.keys.sweepDue(), ["LT", String(due.at), String(this.ctx)]]);
  }

  /** A new attempt's message, and its work item queued for the runners that may take it. */
  dispatch(jobId: number, attempt: number): void {
    // A part full of dispatches, and guarded, is closed: the next starts with this message.
    const full = this.current;
    if (full.dispatches >= DISPATCHES_PER_PART && full.ops.some((op) => op[3] !== undefined))
      this.parts.push({ ops: [], queued: new Map(), dispatches: 0 });
    this.current.dispatches++;
    const job = this.job(jobId);
    const message = dispatchMessage(this.state, job, attempt, this.now);
    const key = this.keys.message(this.ctx, this.state.callerId, message.id);
    this.ops.push(["H", key, encodePairs(codecs.message, message), 2]);
    this.out.messages.push(message);
    const queue = readyQueueOf(this.keys, this.state, {
      ...job.spec,
      script_type: scriptTypeOf({ id: job.id, script_type: job.spec.script_type }),
    });
    const queued = this.current.queued;
    const items = queued.get(queue.key) ?? [];
    items.push(attemptItem(this.keys, this.state, job, attempt, job.previousRunner));
    queued.set(queue.key, items);
    this.out.ready.set(queue.key, queue);
  }

  /** A failed attempt (retried later): its message ends in error, its slot is freed. */
  attemptFailed(jobId: number, attempt: number): void {
    const job = this.job(jobId);
    // The failed attempt's runner is the one the retry will avoid.
    this.release(job, attempt, job.previousRunner);
    const messageKey = this.keys.message(this.ctx, this.state.callerId, messageId(job, attempt));
    const ended = encodePairs(codecs.message, {
      status: "error",
      ended_at: this.secs,
      updated_at: this.secs,
      runner_id: job.previousRunner,
    });
    this.ops.push(["H", messageKey, ended, 3]);
    this.appendLogs(job, messageKey);
  }

  /**
   * A job out of retries kept in the context's dead letters, within the context's cap
   * (scripts/dead-letter-cap.ts): only a batch that writes a dead letter pays for reading the
   * cap and the index's size.
   */
  deadLetter(effect: Extract<FlowEffect, { type: "deadLetter" }>): void {
    const job = this.job(effect.job);
    const entry: DeadLetter = {
      id: deadLetterIds.job(this.state.id, job.id, job.attempt),
      kind: effect.kind,
      context_id: this.ctx,
      flow_id: this.state.id,
      job_id: job.id,
      job_key: jobKey(job),
      caller_id: this.state.callerId,
      ...(job.attempt > 0 ? { message_id: messageId(job, job.attempt) } : {}),
      attempts: job.attempt - job.attemptFloor,
      reason: effect.reason,
      at: this.secs,
    };
    const k = this.keys;
    // Keys, which the call names by position (KEYED_VALUES, commit-calls.ts).
    const where = [k.deadLetterIndex(this.ctx), k.context(this.ctx), k.contextCounters(this.ctx)];
    const args = [...where, entry.id, JSON.stringify(entry), String(this.now), String(this.deadLettersMax)];
    this.ops.push(["X", k.deadLetters(this.ctx), args]);
  }

  /** The flow began to unwind: its record and status indexes (flow-lifecycle.ts). */
  flowCompensating(): void {
    if (!this.standalone) this.ops.push(...compensatingOps(this.keys, this.state, this.now));
  }

  /**
   * An ended flow runs again: its record and its place in the status indexes (`rerunOps`), out of
   * retention's set of how it had ended (`was`), and each job run again forgets its end.
   */
  flowRerun({ jobs, was }: Extract<FlowEffect, { type: "flowRerun" }>): void {
    const { state } = this;
    const member = deadlineMember(deadlineOwner(state));
    if (!this.standalone) this.ops.push(...rerunOps(this.keys, state, was, this.now));
    // Running again: nothing of it may be removed now (retention.ts, the purge's guard).
    const ended = endedSet(was);
    if (ended) this.ops.push(["R", this.keys.ended(this.ctx, ended), [member]]);
    for (const jobId of jobs) this.jobRerun(this.job(jobId));
    this.deadlinesStart();
  }

  private jobRerun(job: JobState): void {
    const jobHash = this.keys.job(this.ctx, this.state.callerId, job.id);
    // The last run's final message took its end from the job, which is about to forget it: the
    // end is written into the message first (if the job ended after an attempt).
    const last = job.pastMessages?.at(-1)?.[1];
    if (last !== undefined) this.ops.push(["E", this.keys.message(this.ctx, this.state.callerId, last), [jobHash]]);
    const again = encodePairs(codecs.job, {
      status: job.status,
      message_base: job.messageBase,
      attempt_floor: job.attemptFloor,
      ...(job.pastMessages ? { past_messages: job.pastMessages } : {}),
      ...(job.pastChildren ? { past_children: job.pastChildren } : {}),
      updated_at: this.secs,
    });
    this.ops.push(["H", jobHash, again]);
    this.ops.push(["D", jobHash, ["error", "skip_reason", "ended_at", "last_runner_id", "child_flow_id"]]);
  }

  /**
   * A job reached its final status: the job alone is written (its last attempt's message takes
   * its final status, end and runner from it when read, messageEnd), which saves a write per job.
   * ended_at is new on the first write of this outcome, and only then (a re-run deletes it).
   */
  jobEnded(jobId: number): void {
    const job = this.job(jobId);
    this.release(job, job.attempt, job.delivery?.runnerId);
    const end = encodePairs(codecs.job, {
      status: job.status,
      result: job.result ?? {},
      error: job.error,
      skip_reason: job.skipReason,
      attempt: job.attempt,
      latency_ms: job.latencyMs,
      duration_ms: job.durationMs,
      ended_at: this.secs,
      last_runner_id: job.delivery?.runnerId,
      child_flow_id: job.child,
      updated_at: this.secs,
    });
    this.ops.push(["H", this.keys.job(this.ctx, this.state.callerId, job.id), end, 3]);
    if (!this.standalone) this.ops.push(...failureOps(this.keys, this.state, job.id));
    const index = this.waitIndex(job);
    if (index) this.ops.push(["R", index, [waitMember(this.state.id, job.id)]]);
    if (job.attempt > 0)
      this.appendLogs(job, this.keys.message(this.ctx, this.state.callerId, messageId(job, job.attempt)));
  }

  /**
   * The flow ended: its status, its place in the indexes and retention's set, its result mail in
   * the caller's inbox (and on msg_out to be POSTed, for a caller with https addresses), and what
   * the run adds to the context's figures. Once: the section is guarded by the flow's ended_at.
   */
  flowEnded(): void {
    const { state } = this;
    const member = deadlineMember(deadlineOwner(state));
    if (!this.standalone) this.ops.push(...endedOps(this.keys, state, this.secs));
    this.ops.push(["R", this.keys.deadlines(this.ctx), [member]]);
    // Kept until the context's retention window for how it ended has passed (retention.ts): a
    // flow that unwound failed, and is kept as long as one in error.
    const ended = endedSet(state.status);
    if (ended) this.ops.push(["Z", this.keys.ended(this.ctx, ended), [String(this.now), member]]);
    const report = resultMessage(state, this.now);
    const key = this.keys.message(this.ctx, state.callerId, report.id);
    this.ops.push(["H", key, encodePairs(codecs.message, report), 2]);
    this.ops.push(["P", this.keys.msgIn(this.ctx, state.callerId), [key]]);
    this.ops.push(["Z", this.keys.inboxDue(this.ctx), [String(this.now), inboxEntry(state.callerId, key)]]);
    this.out.messages.push(report);
    // Only a caller with https addresses to POST it to costs the relay anything.
    if (state.notifyHttps !== false) {
      this.posted.push(key);
      this.out.notifies = true;
    }
    const figures = flowFigures(state);
    if (figures) this.ops.push(["P", this.keys.contextFigures(this.ctx), [JSON.stringify(figures)]]);
  }

  /** Frees the slot an attempt held at `runner` (in the batch's last section). */
  private release(job: JobState, attempt: number, runner: number | undefined): void {
    if (runner === undefined || attempt === 0) return;
    const key = this.keys.runnerSlots(this.ctx, runner);
    const entry = this.out.frees.get(key) ?? { runner, items: [] };
    entry.items.push(attemptItem(this.keys, this.state, job, attempt));
    this.out.frees.set(key, entry);
  }

  /** The log lines the step brought for `job`, onto the message at `messageKey` (once a step). */
  private appendLogs(job: JobState, messageKey: string): void {
    const logs = this.step.logs;
    if (this.logsWritten || logs?.job !== job.id || logs.lines.length === 0) return;
    this.ops.push(["L", messageKey, [JSON.stringify(logs.lines)]]);
    this.logsWritten = true;
  }

  /**
   * The section's operations, complete, part by part: each part's queued work items, in the last
   * the results to POST and the log lines no effect took (a logs report: onto the current
   * attempt's message), and in each the surest guard first, so that a part written before (a
   * retried script call, a replayed transition) is skipped whole. A part with no operations is
   * left out: a step that writes nothing has none.
   */
  close(): SectionPart[] {
    for (const part of this.parts) for (const [queue, items] of part.queued) part.ops.push(["P", queue, items]);
    if (this.posted.length > 0) this.ops.push(["P", this.keys.msgOut(this.ctx), this.posted]);
    const logs = this.step.logs;
    if (logs && !this.logsWritten) {
      const job = this.job(logs.job);
      if (job.attempt > 0)
        this.appendLogs(job, this.keys.message(this.ctx, this.state.callerId, messageId(job, job.attempt)));
    }
    return this.parts.filter((part) => part.ops.length > 0).map(({ ops }) => guardFirst(ops));
  }
}
