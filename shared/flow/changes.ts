import {
  flowTrigger,
  progressCount,
  type FlowEventType,
  type FlowStreamEvent,
  type JobStatus,
  type Log,
} from "../model/index.js";
import { changedJobs } from "./draft.js";
import type { FlowEffect, FlowEvent, Transition } from "./events.js";
import { jobKey, jobKind } from "./state.js";
import type { FlowState, JobState } from "./state.js";
import type { AddedJob } from "../model/index.js";

/**
 * A change of a flow as its event stream tells it, before the Durable Object numbers it: the
 * stream event without `seq` and the flow's ids (which the object adds when it journals it).
 */
export type FlowChange = Omit<FlowStreamEvent, "seq" | "context_id" | "flow_id" | "trace_id">;

/** What a subscriber was last told of a job: its status and attempt. */
export interface Published {
  status: JobStatus;
  attempt: number;
}

/** How many jobs are in each status. */
function progressOf(state: FlowState): Record<JobStatus, number> {
  const { total: _total, ...counts } = progressCount(state.order.map((id) => state.jobs.job(id).status));
  return counts;
}

/** A change of the flow as a whole, with its job counts and name (and its run, from a re-run on). */
export function flowChange(
  type: FlowEventType,
  state: FlowState,
  at: number,
  extra: Partial<FlowChange> = {},
): FlowChange {
  const name = state.identity?.name;
  return {
    type,
    at_ms: at,
    status: state.status,
    ...runOf(state),
    progress: progressOf(state),
    ...(name !== undefined ? { name } : {}),
    ...extra,
  };
}

/** The run an event of `state` is of, told from the first re-run on (absent: run 1). */
function runOf(state: Pick<FlowState, "run">): { run?: number } {
  return state.run !== undefined && state.run > 1 ? { run: state.run } : {};
}

/** Job events told during a re-run carry its number, as the flow's own do. */
function inRun(state: FlowState, changes: FlowChange[]): FlowChange[] {
  const run = runOf(state);
  return run.run === undefined ? changes : changes.map((c) => (c.run === undefined ? { ...c, ...run } : c));
}

/** The `flow.rerun` event: the run it starts, the jobs it runs again, from which job, what env it changed. */
function rerunChange(state: FlowState, effect: Extract<FlowEffect, { type: "flowRerun" }>, at: number): FlowChange {
  return flowChange("flow.rerun", state, at, {
    run: state.run ?? 2,
    jobs: effect.jobs,
    ...(effect.from !== undefined ? { from_job_id: effect.from } : {}),
    ...(effect.env !== undefined ? { env_changed: effect.env } : {}),
  });
}

function jobChange(type: FlowEventType, job: JobState, at: number, extra: Partial<FlowChange> = {}): FlowChange {
  return {
    type,
    at_ms: at,
    status: job.status,
    job_id: job.id,
    attempt: job.attempt,
    ...(job.delivery ? { runner_id: job.delivery.runnerId } : {}),
    ...(job.spec.compensates !== undefined ? { compensates: job.spec.compensates } : {}),
    ...extra,
  };
}

/** The event that tells a flow's end, by how it ended. */
const END: Partial<Record<FlowState["status"], FlowEventType>> = {
  finished: "flow.finished",
  error: "flow.error",
  compensated: "flow.compensated",
  compensation_failed: "flow.compensation_failed",
};

/** The flow began to unwind: why it failed, and its status as it unwinds. */
function compensatingChange(state: FlowState, at: number): FlowChange {
  const error = state.error ? { error: state.error.reason } : {};
  return { ...flowChange("flow.compensating", state, at, error), status: "compensating" };
}

/** The job-level event a runner's report (or the dispatcher's assignment) is, when it applied. */
const REPORTED: Partial<Record<FlowEvent["type"], FlowEventType>> = {
  assigned: "job.dispatched",
  delivered: "job.delivered",
  acknowledged: "job.delivered",
  started: "job.started",
  heartbeat: "job.heartbeat",
  logs: "job.logs",
};

/** The flow's first event: it exists, with its jobs not yet started; what started it, its labels and priority. */
export function createdChange(state: FlowState, at: number): FlowChange {
  const { labels, schedule_id } = state.identity ?? {};
  return flowChange("flow.created", state, at, {
    ...(labels !== undefined ? { labels } : {}),
    ...(state.priority !== 0 ? { priority: state.priority } : {}),
    trigger: flowTrigger({ schedule_id, parent: state.parent, template: state.template }),
  });
}

/**
 * The changes one applied transition made, in the order they happened: the flow starting (or
 * being cancelled, or re-run), then each job's, then the flow's end. Pure: derived from the
 * event, the states around it and the effects the machine owes.
 */
export function changesOf(before: FlowState, t: Transition, event: FlowEvent, lines?: Log[]): FlowChange[] {
  if (t.outcome !== "applied") return [];
  const after = t.state;
  const at = event.at;
  const out: FlowChange[] = [];
  const job = (id: number) => after.jobs.job(id);
  // A cancel that unwinds the flow tells its end later, as any unwinding does; one that does not
  // is the flow's end.
  const unwound = t.effects.some((e) => e.type === "flowCompensating");
  if (event.type === "cancel") {
    const cancelled = flowChange("flow.cancelled", after, at, { reason: event.reason });
    out.push(unwound ? { ...cancelled, status: "compensating" } : cancelled);
  }
  for (const effect of t.effects) {
    if (effect.type === "flowStarted") out.push(flowChange("flow.started", after, at));
    if (effect.type === "flowRerun") out.push(rerunChange(after, effect, at));
  }
  const reported = REPORTED[event.type];
  if (reported && "job" in event) {
    // A delivery whose answer never came says so (`reason`), as a refused one's job.ready does.
    const unconfirmed = event.type === "delivered" && event.unconfirmed ? refusal(job(event.job)) : {};
    out.push(jobChange(reported, job(event.job), at, reported === "job.logs" && lines ? { lines } : unconfirmed));
  }
  if (event.type === "childStarted")
    out.push(jobChange("job.child_started", job(event.job), at, { child_flow_id: event.child }));
  for (const id of changedJobs(before, after)) {
    const was = before.jobs.get(id);
    const now = job(id);
    // A job new to the flow is told by job.added, with its status.
    if (was && now.status === "waiting_for_prerequisites" && was.status !== now.status)
      out.push(jobChange("job.waiting", now, at));
  }
  for (const effect of t.effects) {
    switch (effect.type) {
      case "jobsAdded":
        for (const id of effect.jobs) out.push(addedChange(job(id), at));
        break;
      // A map started over its list: its instances are told as added when it expands.
      case "expand":
        out.push(jobChange("job.started", job(effect.job), at));
        break;
      case "dispatch":
        out.push(jobChange("job.ready", job(effect.job), at, refusal(job(effect.job))));
        break;
      // In the order they happened: after the end of the job that let them start.
      case "waitStarted": {
        const now = job(effect.job);
        const until = now.deadline?.at ?? at;
        out.push(
          jobChange("job.wait_started", now, at, {
            event_name: now.spec.wait?.event ?? "",
            event_key: now.waitKey ?? "",
            until_ms: until,
          }),
        );
        break;
      }
      case "sleepStarted":
        out.push(jobChange("job.sleep_started", job(effect.job), at, { until_ms: job(effect.job).deadline?.at ?? at }));
        break;
      case "superviseChild":
        // A child flow's start (its later looks at the child come from its deadline: not news).
        if (event.type !== "deadline") out.push(jobChange("job.started", job(effect.job), at));
        break;
      case "attemptFailed": {
        const now = job(effect.job);
        const retry = now.deadline?.kind === "retry" ? { retry_at_ms: now.deadline.at } : {};
        out.push(jobChange("job.retry_scheduled", now, at, { ...retry, ...(now.error ? { error: now.error } : {}) }));
        break;
      }
      case "jobEnded": {
        const now = job(effect.job);
        if (now.status === "finished") out.push(jobChange("job.finished", now, at, { result: now.result ?? {} }));
        else if (now.status === "skipped")
          out.push(jobChange("job.skipped", now, at, { reason: now.skipReason ?? "" }));
        else out.push(jobChange("job.error", now, at, now.error ? { error: now.error } : {}));
        break;
      }
      case "deadLetter":
        out.push(jobChange("job.dead_lettered", job(effect.job), at, { reason: effect.reason }));
        break;
      case "flowCompensating":
        out.push(compensatingChange(after, at));
        break;
    }
  }
  // A job the dispatcher could not place goes back to waiting for a runner: ready again.
  if (event.type === "unassigned") out.push(jobChange("job.ready", job(event.job), at, refusal(job(event.job))));
  if (t.effects.some((e) => e.type === "flowEnded") && (event.type !== "cancel" || unwound)) {
    const error = after.error ? { error: after.error.reason } : {};
    out.push(flowChange(END[after.status] ?? "flow.error", after, at, error));
  }
  return inRun(after, out);
}

/** A job that joined the flow while it ran, as a watcher draws it. */
export function addedChange(job: JobState, at: number): FlowChange {
  const added: AddedJob = {
    key: jobKey(job),
    ...(job.name !== undefined ? { name: job.name } : {}),
    kind: jobKind(job.spec),
    ...(job.spec.script_type !== undefined ? { script_type: job.spec.script_type } : {}),
    depends: job.depends,
    ...(job.mapOf !== undefined ? { map_of: job.mapOf } : {}),
    ...(job.itemIndex !== undefined ? { item_index: job.itemIndex } : {}),
    ...(job.addedBy !== undefined ? { added_by: job.addedBy } : {}),
  };
  return jobChange("job.added", job, at, { job: added });
}

function refusal(job: JobState): Partial<FlowChange> {
  return job.refused ? { reason: job.refused } : {};
}

/** The event that tells a job's current status to a subscriber who missed how it got there. */
const CATCH_UP: Record<JobStatus, FlowEventType> = {
  waiting_for_prerequisites: "job.waiting",
  dispatched: "job.ready",
  started: "job.started",
  finished: "job.finished",
  error: "job.error",
  skipped: "job.skipped",
};

/**
 * The event that tells a job's current status: a running wait or sleep as its start (what it
 * waits for, until when), a skipped job with why, an ended one with its result or error.
 */
function caughtUp(job: JobState, at: number): FlowChange {
  const due = job.deadline;
  if (job.status === "started" && due?.kind === "wait") {
    const waiting = { event_name: job.spec.wait?.event ?? "", event_key: job.waitKey ?? "", until_ms: due.at };
    return jobChange("job.wait_started", job, at, waiting);
  }
  if (job.status === "started" && due?.kind === "sleep")
    return jobChange("job.sleep_started", job, at, { until_ms: due.at });
  if (job.status === "started" && due?.kind === "child" && job.child !== undefined)
    return jobChange("job.child_started", job, at, { child_flow_id: job.child });
  if (job.status === "skipped") return jobChange("job.skipped", job, at, { reason: job.skipReason ?? "" });
  const extra: Partial<FlowChange> =
    job.status === "finished" ? { result: job.result ?? {} } : job.error ? { error: job.error } : {};
  return jobChange(CATCH_UP[job.status], job, at, extra);
}

/**
 * The changes a subscriber has not been told of, when the state moved on without the object
 * seeing the transitions (a commit whose outcome was unknown, then read back from storage): one
 * event per job whose status or attempt differs from what was published (a job never published
 * counts as `created`'s status, attempt 0), and the flow's own status last.
 */
export function catchUpChanges(
  state: FlowState,
  published: ReadonlyMap<number, Published>,
  flowStatus: FlowState["status"] | undefined,
  at: number,
): FlowChange[] {
  const out: FlowChange[] = [];
  for (const id of state.order) {
    const job = state.jobs.job(id);
    const grown = job.mapOf !== undefined || job.addedBy !== undefined;
    // A job that joined the flow and was never told is told as added first, then as it is.
    if (grown && !published.has(id)) out.push(addedChange(job, at));
    const told = published.get(id) ?? { status: "dispatched", attempt: 0 };
    if (told.status === job.status && told.attempt === job.attempt) continue;
    if (job.status === "dispatched" && job.attempt === 0) continue;
    out.push(caughtUp(job, at));
  }
  if (flowStatus !== undefined && flowStatus !== state.status) {
    const type: FlowEventType =
      END[state.status] ?? (state.status === "compensating" ? "flow.compensating" : "flow.started");
    out.push(flowChange(type, state, at, state.error ? { error: state.error.reason } : {}));
  }
  return inRun(state, out);
}
