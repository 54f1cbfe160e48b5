import type { ResultMap } from "../model/index.js";
import { jobKey, type Deadline, type DeadlineKind, type FlowState, type JobState } from "./state.js";

/**
 * The flow state machine: `(state, event) → (state, effects)`, with no I/O. The Durable Object
 * feeds it events, persists what changed and carries out the effects. Every event names the
 * attempt it is about; an event that does not fit the state it expects (a replay, a late or
 * reordered webhook, another runner) leaves the state untouched and says why.
 */

/** Something that happened to a flow. `at` is epoch milliseconds. */
export type FlowEvent =
  | { type: "start"; at: number }
  | { type: "assigned"; job: number; attempt: number; runner: number; at: number }
  /** The assigned runner could not be reached: the attempt may go to another runner. */
  | { type: "unassigned"; job: number; attempt: number; runner: number; at: number }
  | { type: "delivered"; job: number; attempt: number; runner: number; acknowledged: boolean; at: number }
  | { type: "acknowledged"; job: number; attempt: number; runner: number; at: number }
  | { type: "started"; job: number; attempt: number; runner: number; at: number }
  | { type: "heartbeat"; job: number; attempt: number; runner: number; at: number }
  /** Log lines of the running attempt arrived (the shell appends them to its message). */
  | { type: "logs"; job: number; attempt: number; runner: number; at: number }
  | { type: "finished"; job: number; attempt: number; runner: number; result: ResultMap; at: number }
  | { type: "failed"; job: number; attempt: number; runner: number; error: string; at: number }
  | { type: "deadline"; job: number; attempt: number; kind: DeadlineKind; at: number }
  | { type: "cancel"; reason: string; at: number };

/** What the shell must do because of a transition. */
export type FlowEffect =
  | { type: "flowStarted" }
  /** Send this attempt of the job to a runner (its message is created with the transition). */
  | { type: "dispatch"; job: number; attempt: number }
  /** The job reached a final status (finished or error). */
  | { type: "jobEnded"; job: number }
  /** The flow reached a final status: report it to the actor. */
  | { type: "flowEnded" };

/** How an event was taken: applied, already applied (a replay), or refused and why. */
export type Outcome = "applied" | "duplicate" | "stale" | "wrong-runner" | "not-applicable";

export interface Transition {
  state: FlowState;
  effects: FlowEffect[];
  outcome: Outcome;
  /** Why an event was not applied, for the caller. */
  reason?: string;
}

function unchanged(state: FlowState, outcome: Exclude<Outcome, "applied">, reason: string): Transition {
  return { state, effects: [], outcome, reason };
}

const ENDED = new Set(["finished", "error"]);
const GRACE_MS = 60_000;

/** A mutable draft of the flow: jobs are copied on first write, the rest shared. */
class Draft {
  readonly flow: FlowState;
  private readonly jobs: Record<number, JobState>;
  readonly effects: FlowEffect[] = [];

  constructor(state: FlowState) {
    this.jobs = { ...state.jobs };
    this.flow = { ...state, jobs: this.jobs, result: state.result };
  }

  job(id: number): JobState {
    return this.jobs[id] as JobState;
  }

  /** Applies a patch; a field given as undefined is removed. */
  update(id: number, patch: { [K in keyof JobState]?: JobState[K] | undefined }): JobState {
    const next = { ...this.job(id), ...patch };
    for (const key of Object.keys(patch) as (keyof JobState)[]) if (patch[key] === undefined) delete next[key];
    this.jobs[id] = next as JobState;
    return next as JobState;
  }

  done(): Transition {
    return { state: this.flow, effects: this.effects, outcome: "applied" };
  }
}

function deadline(kind: DeadlineKind, attempt: number, at: number, seconds: number, extraMs = 0): Deadline {
  return { kind, attempt, at: at + seconds * 1000 + extraMs };
}

/** The result deadline of an attempt: the flow's timeout_result, or the job's timeout plus grace. */
function resultDeadline(flow: FlowState, job: JobState, at: number): Deadline {
  return flow.timeouts.timeout_result !== undefined
    ? deadline("result", job.attempt, at, flow.timeouts.timeout_result)
    : deadline("result", job.attempt, at, job.spec.timeout, GRACE_MS);
}

function dispatch(d: Draft, id: number, at: number): void {
  const job = d.job(id);
  const attempt = job.attempt + 1;
  d.update(id, {
    status: "dispatched",
    attempt,
    delivery: undefined,
    startedAt: undefined,
    heartbeatAt: undefined,
    deadline: deadline("delivery", attempt, at, d.flow.timeouts.timeout),
  });
  d.effects.push({ type: "dispatch", job: id, attempt });
}

/** Applies one event. Never throws for a well-typed event; refuses what does not fit. */
export function apply(state: FlowState, event: FlowEvent): Transition {
  switch (event.type) {
    case "start":
      return start(state, event.at);
    case "cancel":
      return cancel(state, event.reason, event.at);
    case "deadline":
      return onDeadline(state, event);
    default:
      return onJobEvent(state, event);
  }
}

function start(state: FlowState, at: number): Transition {
  if (state.status !== "dispatched") return unchanged(state, "duplicate", `the flow is already ${state.status}`);
  const d = new Draft(state);
  d.flow.status = "started";
  d.flow.startedAt = at;
  d.effects.push({ type: "flowStarted" });
  for (const id of state.order) {
    if (d.job(id).dependends.length === 0) dispatch(d, id, at);
    else d.update(id, { status: "waiting_for_prerequisites" });
  }
  return d.done();
}

type JobEvent = Extract<FlowEvent, { job: number; runner: number }>;

function onJobEvent(state: FlowState, event: JobEvent): Transition {
  const job = state.jobs[event.job];
  if (!job) return unchanged(state, "not-applicable", `job ${event.job} is not part of this flow`);
  if (event.attempt !== job.attempt) {
    return unchanged(state, "stale", `attempt ${event.attempt} is not the current attempt (${job.attempt}) of job ${jobKey(job)}`);
  }
  if (event.type === "assigned") return assign(state, job, event);
  if (event.type === "unassigned") {
    if (job.status !== "dispatched" || job.delivery?.runnerId !== event.runner || job.delivery.state !== "assigned") {
      return unchanged(state, "stale", `attempt ${job.attempt} of job ${jobKey(job)} is not waiting on runner ${event.runner}`);
    }
    const d = new Draft(state);
    d.update(job.id, { delivery: undefined });
    return d.done();
  }
  if (!job.delivery || job.delivery.runnerId !== event.runner) {
    return unchanged(state, "wrong-runner", `attempt ${job.attempt} of job ${jobKey(job)} was not given to runner ${event.runner}`);
  }
  if (ENDED.has(job.status)) {
    const same = (event.type === "finished" && job.status === "finished") || (event.type === "failed" && job.status === "error");
    return unchanged(state, same ? "duplicate" : "stale", `job ${jobKey(job)} already ${job.status}`);
  }
  const d = new Draft(state);
  const delivery = job.delivery;
  switch (event.type) {
    case "delivered":
      if (delivery.state !== "assigned") return unchanged(state, "duplicate", "already delivered");
      d.update(job.id, {
        delivery: { ...delivery, state: event.acknowledged ? "acknowledged" : "delivered", at: event.at },
        deadline: event.acknowledged ? resultDeadline(state, job, event.at) : deadline("ack", job.attempt, event.at, state.timeouts.timeout_ack),
      });
      return d.done();
    case "acknowledged":
      if (delivery.state === "acknowledged") return unchanged(state, "duplicate", "already acknowledged");
      d.update(job.id, { delivery: { ...delivery, state: "acknowledged", at: event.at }, deadline: resultDeadline(state, job, event.at) });
      return d.done();
    case "started":
      if (job.status === "started") return unchanged(state, "duplicate", "already started");
      d.update(job.id, { status: "started", startedAt: event.at, delivery: { ...delivery, state: "acknowledged" }, deadline: resultDeadline(state, job, event.at) });
      return d.done();
    case "logs":
      // Nothing changes in the machine; the transition only carries the lines to storage.
      return { state, effects: [], outcome: "applied" };
    case "heartbeat":
      // A replayed or overtaken heartbeat must not move the last one back.
      // An overtaken heartbeat of the current attempt is still news of it: a duplicate, not stale.
      if (job.heartbeatAt !== undefined && event.at <= job.heartbeatAt) {
        return unchanged(state, "duplicate", "a later heartbeat was already taken");
      }
      d.update(job.id, { heartbeatAt: event.at });
      return d.done();
    case "finished":
      finish(d, job.id, event.result, event.at);
      return d.done();
    case "failed":
      fail(d, job.id, event.error, event.at);
      return d.done();
  }
}

function assign(state: FlowState, job: JobState, event: Extract<FlowEvent, { type: "assigned" }>): Transition {
  // Once assigned, the attempt stays with its runner: a replay is a duplicate whatever happened since.
  if (job.delivery) {
    return job.delivery.runnerId === event.runner
      ? unchanged(state, "duplicate", "already assigned to this runner")
      : unchanged(state, "wrong-runner", `attempt ${job.attempt} of job ${jobKey(job)} is assigned to runner ${job.delivery.runnerId}`);
  }
  if (job.status !== "dispatched") return unchanged(state, "stale", `job ${jobKey(job)} is ${job.status}`);
  const d = new Draft(state);
  d.update(job.id, { delivery: { runnerId: event.runner, state: "assigned", at: event.at } });
  return d.done();
}

function finish(d: Draft, id: number, result: ResultMap, at: number): void {
  const job = d.update(id, { status: "finished", result, deadline: undefined });
  d.flow.result = { ...d.flow.result, [jobKey(job)]: result };
  d.effects.push({ type: "jobEnded", job: id });
  if (d.flow.status !== "started") return;
  for (const dependent of job.dependents) {
    const next = d.job(dependent);
    if (next.status === "waiting_for_prerequisites" && next.dependends.every((dep) => d.job(dep).status === "finished")) {
      dispatch(d, dependent, at);
    }
  }
  if (d.flow.order.every((jobId) => d.job(jobId).status === "finished")) endFlow(d, at);
}

function fail(d: Draft, id: number, reason: string, at: number): void {
  const failing = d.job(id);
  // A job with retries left (spec.retries) runs again as its next attempt, while the flow runs.
  if (d.flow.status === "started" && failing.attempt <= failing.spec.retries) {
    dispatch(d, id, at);
    return;
  }
  const job = d.update(id, { status: "error", error: reason, deadline: undefined });
  d.effects.push({ type: "jobEnded", job: id });
  const flowFails = d.flow.status === "started";
  if (flowFails) {
    d.flow.status = "error";
    d.flow.error = { job: id, ...(job.name ? { name: job.name } : {}), reason };
  }
  // Whatever depended on the failed job can never run: say so on each of them.
  const pending = [...job.dependents];
  while (pending.length > 0) {
    const next = d.job(pending.pop() as number);
    if (next.status !== "waiting_for_prerequisites") continue;
    d.update(next.id, { status: "error", error: `not run: dependency ${jobKey(job)} failed` });
    d.effects.push({ type: "jobEnded", job: next.id });
    pending.push(...next.dependents);
  }
  // A failed flow dispatches nothing more: the jobs still waiting will never run either.
  if (flowFails) {
    for (const other of d.flow.order) {
      if (d.job(other).status !== "waiting_for_prerequisites") continue;
      d.update(other, { status: "error", error: `not run: the flow failed (job ${jobKey(job)})` });
      d.effects.push({ type: "jobEnded", job: other });
    }
  }
  if (d.flow.endedAt === undefined) endFlow(d, at);
}

function endFlow(d: Draft, at: number): void {
  if (d.flow.status === "started") d.flow.status = "finished";
  d.flow.endedAt = at;
  d.effects.push({ type: "flowEnded" });
}

function onDeadline(state: FlowState, event: Extract<FlowEvent, { type: "deadline" }>): Transition {
  const job = state.jobs[event.job];
  const due = job?.deadline;
  if (!job || !due || due.kind !== event.kind || due.attempt !== event.attempt || job.attempt !== event.attempt) {
    return unchanged(state, "stale", "no such deadline is pending");
  }
  if (event.at < due.at) return unchanged(state, "not-applicable", "the deadline has not passed yet");
  const seconds =
    due.kind === "delivery" ? state.timeouts.timeout : due.kind === "ack" ? state.timeouts.timeout_ack : (state.timeouts.timeout_result ?? job.spec.timeout);
  const what = due.kind === "delivery" ? "delivered to a runner" : due.kind === "ack" ? "acknowledged" : "finished";
  const d = new Draft(state);
  fail(d, job.id, `attempt ${job.attempt} was not ${what} within ${seconds} s`, event.at);
  return d.done();
}

function cancel(state: FlowState, reason: string, at: number): Transition {
  if (ENDED.has(state.status)) return unchanged(state, "duplicate", `the flow already ${state.status}`);
  const d = new Draft(state);
  d.flow.status = "error";
  d.flow.error = { job: 0, reason: `cancelled: ${reason}` };
  for (const id of state.order) {
    const job = d.job(id);
    if (ENDED.has(job.status)) continue;
    d.update(id, { status: "error", error: `cancelled: ${reason}`, deadline: undefined });
    d.effects.push({ type: "jobEnded", job: id });
  }
  endFlow(d, at);
  return d.done();
}

/** The earliest pending deadline of the flow, or undefined. */
export function nearestDeadline(state: FlowState): Deadline & { job: number } | undefined {
  let nearest: (Deadline & { job: number }) | undefined;
  for (const id of state.order) {
    const due = (state.jobs[id] as JobState).deadline;
    if (due && (!nearest || due.at < nearest.at)) nearest = { ...due, job: id };
  }
  return nearest;
}
