import type { FlowEffect, Transition } from "./events.js";
import type { JobTableDraft } from "./job-table.js";
import type { Deadline, DeadlineKind, FlowState, JobState } from "./state.js";
import { MESSAGE_TIMEOUTS } from "./submission.js";

/** Grace on top of a job's own timeout before the coordinator gives up on it. */
const GRACE_MS = MESSAGE_TIMEOUTS.resultGrace * 1000;
/** Silence allowed from a job without a timeout of its own. */
const NO_TIMEOUT_SILENCE_MS = 3_600_000;
/** Retry backoff when the flow does not say: base and cap of the exponential, full jitter. */
export const RETRY_DEFAULTS = { baseMs: 1_000, capMs: 60_000 } as const;

/** The statuses a job ends in. */
export const ENDED: ReadonlySet<string> = new Set(["finished", "error", "skipped"]);

/**
 * The jobs each applied transition changed, by the state it reached and the one it came from,
 * in the order it changed them (a batch of a 1,000-job flow touches a few jobs, and a commit, its
 * journal, its stream events and its alarm look at those only). Only a cache: without an entry,
 * `changedJobs` compares the two states' job tables, which skips the nodes they share. The state
 * it came from is held weakly: held strongly, each state would keep every earlier one alive.
 */
const changes = new WeakMap<FlowState, { from: WeakRef<FlowState>; ids: ReadonlySet<number> }>();

/**
 * The ids of the jobs that differ between `before` and a later state `after` (reached from it by
 * applied transitions), in the order they were first changed (in id order when the chain of
 * transitions is no longer known). Draft copies a job on its first write, so a job that is the
 * same object in both is unchanged.
 */
export function changedJobs(before: FlowState, after: FlowState): number[] {
  const ids = new Set<number>();
  const chain: ReadonlySet<number>[] = [];
  for (let at = after; at !== before;) {
    const step = changes.get(at);
    const from = step?.from.deref();
    if (!step || !from) return after.jobs.diff(before.jobs);
    chain.push(step.ids);
    at = from;
  }
  for (const step of chain.reverse()) for (const id of step) ids.add(id);
  return [...ids];
}

/** How many jobs, from the start of its order, a state of a running flow had ended. */
const endedPrefix = new WeakMap<FlowState, number>();

/**
 * A mutable draft of the flow: jobs are copied on first write, the rest shared. Its jobs table
 * is a transient builder, which copies only the trie nodes on the paths of the jobs it writes
 * (job-table.ts), so a transition costs the jobs it changes, not the flow.
 */
export class Draft {
  readonly flow: FlowState;
  private readonly jobs: JobTableDraft<JobState>;
  readonly effects: FlowEffect[] = [];
  private readonly touched = new Set<number>();
  /** A job that had ended was made to run again (a re-run): the ended prefix carried over no longer holds. */
  private reopened = false;

  constructor(private readonly from: FlowState) {
    this.jobs = from.jobs.draft();
    this.flow = { ...from, jobs: this.jobs };
  }

  /** The job as the draft has it (with its writes); it must be one of the flow's. */
  job(id: number): JobState {
    return this.jobs.job(id);
  }

  /** Applies a patch; a field given as undefined is removed. */
  update(id: number, patch: { [K in keyof JobState]?: JobState[K] | undefined }): JobState {
    if (patch.status !== undefined && ENDED.has(this.job(id).status) && !ENDED.has(patch.status)) this.reopened = true;
    const next = { ...this.job(id), ...patch };
    for (const key of Object.keys(patch) as (keyof JobState)[]) if (patch[key] === undefined) delete next[key];
    this.jobs.put(id, next as JobState);
    this.touched.add(id);
    return next as JobState;
  }

  /**
   * Adds jobs to the flow (it grows: a map's instances, jobs a result brings): each joins the
   * jobs by its id, and the order at `at` (before the flow's compensations, which come last:
   * compensation.ts), in the order given. Their ids are new to the flow.
   */
  add(jobs: JobState[], at = this.flow.order.length): void {
    for (const job of jobs) {
      this.jobs.put(job.id, job);
      this.touched.add(job.id);
    }
    const order = this.flow.order;
    this.flow.order = [...order.slice(0, at), ...jobs.map((job) => job.id), ...order.slice(at)];
    // Jobs that have not ended now stand at `at`: an ended prefix known past it no longer holds.
    if ((endedPrefix.get(this.from) ?? 0) > at || (endedPrefix.get(this.flow) ?? 0) > at) this.reopened = true;
    endedPrefix.delete(this.flow);
  }

  /**
   * Whether every job of the flow has ended (or the first `length` of its order: its run, its
   * compensations left out). Jobs that ended stay ended while the flow runs (a re-run aside,
   * which `done` watches for), so how far the order is known to be ended is carried from state
   * to state, and a flow whose jobs end one by one is not read whole at every end.
   */
  allEnded(length = this.flow.order.length): boolean {
    let at = this.reopened ? 0 : (endedPrefix.get(this.from) ?? 0);
    const order = this.flow.order;
    while (at < order.length && ENDED.has(this.job(order[at] as number).status)) at++;
    endedPrefix.set(this.flow, at);
    return at >= length;
  }

  done(): Transition {
    this.jobs.seal();
    changes.set(this.flow, { from: new WeakRef(this.from), ids: this.touched });
    // The ended prefix still holds unless an ended job was made to run again (a re-run).
    const carried = endedPrefix.get(this.from);
    if (carried !== undefined && !endedPrefix.has(this.flow) && !this.reopened) endedPrefix.set(this.flow, carried);
    return { state: this.flow, effects: this.effects, outcome: "applied" };
  }
}

export function deadline(kind: DeadlineKind, attempt: number, at: number, seconds: number): Deadline {
  return { kind, attempt, at: at + seconds * 1000 };
}

/**
 * The deadline of a running attempt, a lease: the runner must report something (result,
 * heartbeat, log lines) within the flow's `timeout_result` of its last report, and never runs
 * past the job's own timeout plus grace. Without `timeout_result`, the silence allowed is the
 * job's timeout plus grace. Each report renews the lease; that is how heartbeats keep a long job.
 */
export function leaseDeadline(flow: FlowState, job: JobState, at: number, startedAt: number | undefined): Deadline {
  const timeoutMs = job.spec.timeout * 1000;
  const silenceMs =
    flow.timeouts.timeout_result !== undefined
      ? flow.timeouts.timeout_result * 1000
      : timeoutMs > 0
        ? timeoutMs + GRACE_MS
        : NO_TIMEOUT_SILENCE_MS;
  const hardStop =
    startedAt !== undefined && timeoutMs > 0 ? startedAt + timeoutMs + GRACE_MS : Number.POSITIVE_INFINITY;
  return at + silenceMs < hardStop
    ? { kind: "result", attempt: job.attempt, at: at + silenceMs, why: "silent" }
    : { kind: "result", attempt: job.attempt, at: hardStop, why: "timeout" };
}

/** Sends the next attempt of a job. */
export function dispatch(d: Draft, id: number, at: number): void {
  const job = d.job(id);
  const attempt = job.attempt + 1;
  d.update(id, {
    status: "dispatched",
    attempt,
    delivery: undefined,
    refused: undefined,
    startedAt: undefined,
    heartbeatAt: undefined,
    deadline: deadline("delivery", attempt, at, d.flow.timeouts.timeout),
    queuedAt: at,
  });
  d.effects.push({ type: "dispatch", job: id, attempt });
}

/**
 * What a job's last attempt took, once the job ends at `at`: from queued to delivered (its
 * dispatch latency) and from delivered to its end (its duration), in ms; nothing for a part it
 * never reached. The flow's figures count them (figures.ts). And the end itself (`endedAt`),
 * which views show.
 */
export function timings(
  job: JobState,
  at: number,
): { latencyMs: number | undefined; durationMs: number | undefined; endedAt: number } {
  const delivered = job.delivery && job.delivery.state !== "assigned" ? job.delivery.at : undefined;
  if (delivered === undefined) return { latencyMs: undefined, durationMs: undefined, endedAt: at };
  return {
    latencyMs: job.queuedAt !== undefined ? Math.max(0, delivered - job.queuedAt) : undefined,
    durationMs: Math.max(0, at - delivered),
    endedAt: at,
  };
}

/** The backoff before retry `attempt + 1`: exponential in the attempts so far, full jitter. */
export function backoffMs(flow: FlowState, job: JobState, random: number): number {
  const base = flow.timeouts.retry_base_ms ?? RETRY_DEFAULTS.baseMs;
  const cap = flow.timeouts.retry_cap_ms ?? RETRY_DEFAULTS.capMs;
  const tries = Math.max(1, job.attempt - job.attemptFloor);
  const ceiling = Math.min(cap, base * 2 ** (tries - 1));
  return Math.floor(Math.min(Math.max(random, 0), 0.999999) * ceiling);
}
