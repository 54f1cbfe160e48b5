import { deadline, dispatch, Draft, ENDED, leaseDeadline } from "./draft.js";
import { unchanged, type FlowEvent, type Transition } from "./events.js";
import { lookAgain, onChildEvent } from "./children.js";
import { isCompensation } from "./compensation.js";
import { cancel } from "./cancel.js";
import { fail, finish, skip, startFlow } from "./outcomes.js";
import { reRun } from "./rerun.js";
import { jobKey, jobKind, type Deadline, type Delivery, type FlowState, type JobState } from "./state.js";
import { flowDeadline, sleptUntil } from "./work.js";
import { addInstances } from "./grow.js";
import { mapItems } from "./map.js";
import { addedOf } from "./growth.js";

/**
 * The flow state machine: `(state, event) → (state, effects)`, with no I/O. The Durable Object
 * feeds it events, persists what changed and carries out the effects. Every event names the
 * attempt it is about; an event that does not fit the state it expects (a replay, a late or
 * reordered webhook, another runner) leaves the state untouched — the very same object — and
 * says why.
 */

export type { FlowEffect, FlowEvent, TransitionOutcome, Transition } from "./events.js";

/** Applies one event. Never throws for a well-typed event; refuses what does not fit. */
export function apply(state: FlowState, event: FlowEvent): Transition {
  switch (event.type) {
    case "start":
      return start(state, event.at);
    case "cancel": {
      // Refused, not a duplicate, when nothing is left to stop (the flow ended and none of its
      // attempts is still in flight): a cancel that changes nothing answers a conflict, decided
      // here on the state the batch holds, not by a read racing the flow's end. One that asks to
      // unwind a flow that unwinds already is that same cancel again (a retry): it must not stop
      // the unwinding.
      if (event.compensate && state.status === "compensating")
        return unchanged(state, "duplicate", "the flow is already compensating");
      const d = new Draft(state);
      return cancel(d, event.reason, event.at, undefined, event.compensate ?? false)
        ? d.done()
        : unchanged(state, "not-applicable", `the flow already ended: it is ${state.status}`);
    }
    case "rerun":
      return reRun(state, event);
    case "deadline":
      return onDeadline(state, event);
    case "postponed":
      return postpone(state, event);
    case "resumed":
      return resume(state, event);
    case "event":
      return onEvent(state, event);
    case "childStarted":
    case "childEnded":
    case "childRefused":
      return onChildEvent(state, event);
    case "expanded":
      return expandMap(state, event);
    default:
      return onJobEvent(state, event);
  }
}

function start(state: FlowState, at: number): Transition {
  if (state.status !== "dispatched") return unchanged(state, "duplicate", `the flow is already ${state.status}`);
  const d = new Draft(state);
  startFlow(d, at);
  return d.done();
}

/** An event a wait matched: the wait finishes with its data, if it is still waiting for it. */
function onEvent(state: FlowState, event: Extract<FlowEvent, { type: "event" }>): Transition {
  const job = state.jobs.get(event.job);
  if (!job || jobKind(job.spec) !== "wait")
    return unchanged(state, "not-applicable", `job ${event.job} of this flow is not a wait`);
  if (ENDED.has(job.status)) {
    const same = job.status === "finished" && job.result?.["event_id"] === event.id;
    return unchanged(state, same ? "duplicate" : "stale", `wait ${jobKey(job)} already ended: it is ${job.status}`);
  }
  if (job.deadline?.kind !== "wait" || job.spec.wait?.event !== event.name || job.waitKey !== event.key)
    return unchanged(
      state,
      "stale",
      `wait ${jobKey(job)} is not waiting for ${event.name} with key ${JSON.stringify(event.key)}`,
    );
  const d = new Draft(state);
  finish(d, job.id, { ...event.data, event_id: event.id }, event.at);
  return d.done();
}

/**
 * The shell allocated a map's instances' ids: the map expands, once, each instance dispatched.
 * Its list is read again from its dependency (results do not change once ended), so the event
 * carries only the ids; a list that cannot be taken now (the flow grew past its job limit
 * meanwhile) fails the map. A map that expanded already, ended, or never started is left as is.
 */
function expandMap(state: FlowState, event: Extract<FlowEvent, { type: "expanded" }>): Transition {
  const job = state.jobs.get(event.job);
  if (!job || job.spec.map === undefined) return unchanged(state, "not-applicable", `job ${event.job} is not a map`);
  if (job.deadline?.kind !== "expand" || job.status !== "started")
    return unchanged(state, job.instances ? "duplicate" : "stale", `map ${jobKey(job)} is not waiting to expand`);
  const d = new Draft(state);
  const list = mapItems(state, job);
  if ("error" in list) fail(d, job.id, list.error, event.at, 0.5);
  else for (const id of addInstances(d, job.id, list.items, event.ids)) dispatch(d, id, event.at);
  return d.done();
}

type JobEvent = Extract<FlowEvent, { job: number; runner: number }>;
/** What a job's runner tells of its attempt (through the coordinator's delivery, or its reports). */
type RunnerEvent = Exclude<JobEvent, { type: "assigned" | "unassigned" }>;

function onJobEvent(state: FlowState, event: JobEvent): Transition {
  const job = state.jobs.get(event.job);
  if (!job) return unchanged(state, "not-applicable", `job ${event.job} is not part of this flow`);
  if (event.attempt !== job.attempt) {
    return unchanged(
      state,
      "stale",
      `attempt ${event.attempt} is not the current attempt (${job.attempt}) of job ${jobKey(job)}`,
    );
  }
  if (event.type === "assigned") return assign(state, job, event);
  if (event.type === "unassigned") return unassign(state, job, event);
  return notItsRunners(state, job, event) ?? fromRunner(state, job, event);
}

/** A claim the runner did not take: the attempt waits for a runner again, saying why. */
function unassign(state: FlowState, job: JobState, event: Extract<FlowEvent, { type: "unassigned" }>): Transition {
  if (job.status !== "dispatched" || job.delivery?.runnerId !== event.runner || job.delivery.state !== "assigned") {
    return unchanged(
      state,
      "stale",
      `attempt ${job.attempt} of job ${jobKey(job)} is not waiting on runner ${event.runner}`,
    );
  }
  const d = new Draft(state);
  d.update(job.id, {
    delivery: undefined,
    ...(event.reason ? { refused: `runner ${event.runner} ${event.reason}` } : {}),
  });
  return d.done();
}

/** Why an event of a runner does not fit the attempt: it failed already, it is another runner's, it ended. */
function notItsRunners(state: FlowState, job: JobState, event: RunnerEvent): Transition | undefined {
  if (job.deadline?.kind === "retry")
    return unchanged(state, "stale", `attempt ${job.attempt} of job ${jobKey(job)} already failed`);
  if (!job.delivery || job.delivery.runnerId !== event.runner) {
    return unchanged(
      state,
      "wrong-runner",
      `attempt ${job.attempt} of job ${jobKey(job)} was not given to runner ${event.runner}`,
    );
  }
  if (ENDED.has(job.status)) {
    const same =
      (event.type === "finished" && job.status === "finished") || (event.type === "failed" && job.status === "error");
    return unchanged(state, same ? "duplicate" : "stale", `attempt ${job.attempt} of job ${jobKey(job)} already ended`);
  }
  return undefined;
}

/** An event of the attempt's own runner, the attempt running: delivered, started, alive, ended. */
function fromRunner(state: FlowState, job: JobState, event: RunnerEvent): Transition {
  const d = new Draft(state);
  const delivery = job.delivery as Delivery;
  switch (event.type) {
    case "delivered":
      if (delivery.state !== "assigned") return unchanged(state, "duplicate", "already delivered");
      d.update(job.id, {
        refused: event.unconfirmed ? `runner ${event.runner} ${event.unconfirmed}` : undefined,
        delivery: { ...delivery, state: event.acknowledged ? "acknowledged" : "delivered", at: event.at },
        deadline: event.acknowledged
          ? leaseDeadline(state, job, event.at, job.startedAt)
          : deadline("ack", job.attempt, event.at, state.timeouts.timeout_ack),
      });
      return d.done();
    case "acknowledged":
      if (delivery.state === "acknowledged") return unchanged(state, "duplicate", "already acknowledged");
      d.update(job.id, {
        delivery: { ...delivery, state: "acknowledged", at: event.at },
        deadline: leaseDeadline(state, job, event.at, job.startedAt),
      });
      return d.done();
    case "started":
      if (job.status === "started") return unchanged(state, "duplicate", "already started");
      d.update(job.id, {
        status: "started",
        startedAt: event.at,
        delivery: { ...delivery, state: "acknowledged" },
        deadline: leaseDeadline(state, job, event.at, event.at),
      });
      return d.done();
    case "heartbeat":
    case "logs":
      // An overtaken heartbeat of the current attempt is still news of it: a duplicate, not stale.
      if (event.type === "heartbeat" && job.heartbeatAt !== undefined && event.at <= job.heartbeatAt) {
        return unchanged(state, "duplicate", "a later heartbeat was already taken");
      }
      // Any sign of life renews the attempt's lease (never past the job's own timeout).
      d.update(job.id, {
        ...(event.type === "heartbeat" ? { heartbeatAt: event.at } : {}),
        deadline: later(job.deadline, leaseDeadline(state, job, event.at, job.startedAt)),
      });
      return d.done();
    case "finished": {
      const added = addedOf(state, job.id, event);
      if (added === "unallocated") return unchanged(state, "not-applicable", UNALLOCATED);
      finish(d, job.id, event.result, event.at, added);
      return d.done();
    }
    case "failed":
      fail(d, job.id, event.error, event.at, event.random ?? 0.5);
      return d.done();
  }
}

/** Why a report that adds jobs was not taken: the shell did not allocate their ids (growth.ts), it must come again. */
export const UNALLOCATED = "no ids were allocated for the jobs it adds: report it again";

function later(current: Deadline | undefined, next: Deadline): Deadline {
  return current && current.kind === "result" && current.at > next.at ? current : next;
}

function assign(state: FlowState, job: JobState, event: Extract<FlowEvent, { type: "assigned" }>): Transition {
  // Once assigned, the attempt stays with its runner: a replay is a duplicate whatever happened since.
  if (job.delivery) {
    return job.delivery.runnerId === event.runner
      ? unchanged(state, "duplicate", "already assigned to this runner")
      : unchanged(
          state,
          "wrong-runner",
          `attempt ${job.attempt} of job ${jobKey(job)} is assigned to runner ${job.delivery.runnerId}`,
        );
  }
  if (job.status !== "dispatched" || job.deadline?.kind === "retry")
    return unchanged(state, "stale", `job ${jobKey(job)} is not waiting for a runner`);
  const d = new Draft(state);
  d.update(job.id, { delivery: { runnerId: event.runner, state: "assigned", at: event.at } });
  return d.done();
}

/** The pending deadline an event names, if it is the job's current one. */
function pending(
  state: FlowState,
  event: { job: number; attempt: number; kind: Deadline["kind"] },
): { job: JobState; due: Deadline } | undefined {
  const job = state.jobs.get(event.job);
  const due = job?.deadline;
  if (!job || !due || due.kind !== event.kind || due.attempt !== event.attempt || job.attempt !== event.attempt)
    return undefined;
  return { job, due };
}

function describe(state: FlowState, job: JobState, due: Deadline, why: string | undefined): string {
  switch (due.kind) {
    case "delivery": {
      const because = job.refused ?? why;
      return `attempt ${job.attempt} was not delivered to a runner within ${state.timeouts.timeout} s${because ? `: ${because}` : ""}`;
    }
    case "ack":
      return `attempt ${job.attempt} was not acknowledged within ${state.timeouts.timeout_ack} s${job.refused ? `: ${job.refused}` : ""}`;
    case "wait":
      return `timed out: no event ${job.spec.wait?.event} with key ${JSON.stringify(job.waitKey)} came within ${job.spec.wait?.timeout} s`;
    default:
      return due.why === "timeout"
        ? `attempt ${job.attempt} ran past its timeout of ${job.spec.timeout} s`
        : `attempt ${job.attempt} went silent: no result, heartbeat or log for ${Math.round((due.at - (job.heartbeatAt ?? job.startedAt ?? job.delivery?.at ?? due.at)) / 1000)} s`;
  }
}

function onDeadline(state: FlowState, event: Extract<FlowEvent, { type: "deadline" }>): Transition {
  if (event.kind === "flow") return onFlowDeadline(state, event);
  const found = pending(state, event);
  if (!found) return unchanged(state, "stale", "no such deadline is pending");
  const { job, due } = found;
  if (event.at < due.at) return unchanged(state, "not-applicable", "the deadline has not passed yet");
  if (due.kind === "expand") return unchanged(state, "not-applicable", "a map expands by its expanded event");
  const d = new Draft(state);
  switch (due.kind) {
    case "retry":
      if (state.status !== "started" && !(state.status === "compensating" && isCompensation(job)))
        return unchanged(state, "stale", "the flow is no longer running");
      dispatch(d, job.id, event.at);
      break;
    case "sleep":
      finish(d, job.id, sleptUntil(job, event.at), event.at);
      break;
    case "child":
      lookAgain(d, job, event.at, event.random);
      break;
    case "wait":
      if (job.spec.wait?.on_timeout === "skip") skip(d, job.id, describe(state, job, due, event.why), event.at);
      else fail(d, job.id, describe(state, job, due, event.why), event.at, event.random ?? 0.5);
      break;
    default:
      fail(d, job.id, describe(state, job, due, event.why), event.at, event.random ?? 0.5, due.kind === "delivery");
  }
  return d.done();
}

/**
 * The flow ran past its deadline (`timeouts.flow`): it ends in error, as a cancel ends it, or
 * unwinds if it has compensations (a failure like any other). An unwinding flow has no deadline
 * of its own: each compensation has its timeout and retries.
 */
function onFlowDeadline(state: FlowState, event: Extract<FlowEvent, { type: "deadline" }>): Transition {
  const due = flowDue(state)?.at;
  if (due === undefined) return unchanged(state, "stale", "no flow deadline is pending");
  if (event.at < due) return unchanged(state, "not-applicable", "the deadline has not passed yet");
  const d = new Draft(state);
  const why = `the flow ran past its deadline of ${state.timeouts.flow} s (timeouts.flow)`;
  cancel(d, why, event.at, why, true);
  return d.done();
}

function postpone(state: FlowState, event: Extract<FlowEvent, { type: "postponed" }>): Transition {
  const found = pending(state, event);
  if (!found) return unchanged(state, "stale", "no such deadline is pending");
  if (event.until <= found.due.at) return unchanged(state, "duplicate", "the deadline is already that late");
  const d = new Draft(state);
  d.update(found.job.id, { deadline: { ...found.due, at: event.until } });
  return d.done();
}

/**
 * Moves every pending delivery, acknowledgement and result deadline, and every wait's timeout,
 * later by the outage (no report, and no event, could be taken meanwhile). A sleep, a retry's
 * backoff and the flow's deadline keep their time. A wait moves by the part of the outage after
 * it started: one started once storage was back (the batch that found it back may start it, and
 * this event comes after) was not kept from any event, and moving it made it end late.
 */
function resume(state: FlowState, event: Extract<FlowEvent, { type: "resumed" }>): Transition {
  if (event.downFor <= 0) return unchanged(state, "duplicate", "no time was lost");
  const d = new Draft(state);
  let moved = false;
  for (const id of state.order) {
    const job = state.jobs.job(id);
    const due = job.deadline;
    if (!due || due.kind === "retry" || due.kind === "sleep" || due.kind === "expand") continue;
    const since = due.kind === "wait" ? (job.startedAt ?? -Infinity) : -Infinity;
    const by = Math.max(0, Math.min(event.downFor, (event.until ?? event.at) - since));
    if (by === 0) continue;
    d.update(id, { deadline: { ...due, at: due.at + by } });
    moved = true;
  }
  return moved ? d.done() : unchanged(state, "duplicate", "no deadline is pending");
}

/** The flow's own deadline as a pending one (job 0), while it runs (not while it unwinds) and has one. */
function flowDue(state: FlowState): (Deadline & { job: number }) | undefined {
  const at = state.endedAt === undefined && state.status !== "compensating" ? flowDeadline(state) : undefined;
  return at === undefined ? undefined : { kind: "flow", attempt: 0, at, job: 0 };
}

/** The earliest pending deadline of the flow, or undefined. */
export function nearestDeadline(state: FlowState): (Deadline & { job: number }) | undefined {
  let nearest = flowDue(state);
  for (const id of state.order) {
    const due = state.jobs.job(id).deadline;
    if (due && (!nearest || due.at < nearest.at)) nearest = { ...due, job: id };
  }
  return nearest;
}

/** Every deadline that has passed at `now`, by job, in submission order. */
export function dueDeadlines(state: FlowState, now: number): (Deadline & { job: number })[] {
  const jobs = state.order.flatMap((id) => {
    const due = state.jobs.job(id).deadline;
    return due && due.at <= now ? [{ ...due, job: id }] : [];
  });
  const flow = flowDue(state);
  return flow && flow.at <= now ? [...jobs, flow] : jobs;
}

/**
 * The event for a deadline that came due at `now`. An attempt waiting for a runner in a paused
 * context is not late: its delivery clock starts again (postponed) instead. `random` is the
 * jitter of the retry that a missed deadline may lead to, chosen by the shell.
 */
export function deadlineEvent(
  state: FlowState,
  due: Deadline & { job: number },
  now: number,
  paused: boolean,
  random: number,
  why?: string,
): FlowEvent {
  const { job, attempt, kind } = due;
  return paused && kind === "delivery"
    ? { type: "postponed", job, attempt, kind, until: now + state.timeouts.timeout * 1000, at: now }
    : { type: "deadline", job, attempt, kind, at: now, random, ...(why ? { why } : {}) };
}
