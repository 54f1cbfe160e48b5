import {
  currentRun,
  ENDED,
  flowResult,
  isCompensation,
  jobKey,
  jobKind,
  nearestDeadline,
  waitKeyOf,
  type FlowState,
  type JobState,
} from "../../shared/flow/index.js";
import { progressCount, type FlowView, type JobView, type JobWaiting } from "../../shared/model/index.js";
import { skippedOf } from "../../shared/store/flow-records.js";

const secs = (ms: number) => Math.floor(ms / 1000);

/** Whether the flow moves on: it runs, or it unwinds. */
const moving = (state: FlowState) => state.status === "started" || state.status === "compensating";

/** Why a compensation waits: for the flow to unwind, or for the jobs it waits for to end. */
function compensationWaiting(state: FlowState, job: JobState): JobWaiting {
  const undone = state.jobs.job(job.spec.compensates as number);
  if (state.status !== "compensating")
    return { reason: "compensation", detail: `runs only if the flow unwinds: it undoes ${jobKey(undone)}` };
  const open = [undone, ...job.depends.map((id) => state.jobs.job(id))].filter((j) => !ENDED.has(j.status));
  return { reason: "dependencies", detail: `waiting for ${open.map(jobKey).join(", ") || "its dependencies"} to end` };
}

/** Why a job waits, as far as the flow itself knows (dependencies, backoff, a delivery under way). */
function ownWaiting(state: FlowState, job: JobState): JobWaiting | undefined {
  if (!moving(state)) return undefined;
  if (job.status === "waiting_for_prerequisites" && isCompensation(job)) return compensationWaiting(state, job);
  if (job.status === "waiting_for_prerequisites") {
    const open = job.depends.map((id) => state.jobs.job(id)).filter((dep) => dep.status !== "finished");
    return { reason: "dependencies", detail: `waiting for ${open.map(jobKey).join(", ") || "its dependencies"}` };
  }
  if (job.deadline?.kind === "wait") {
    const detail = `waiting for event ${job.spec.wait?.event} with key ${JSON.stringify(job.waitKey ?? "")}`;
    return { reason: "event", detail, until: secs(job.deadline.at) };
  }
  if (job.deadline?.kind === "sleep") return { reason: "sleep", detail: "sleeping", until: secs(job.deadline.at) };
  if (job.deadline?.kind === "child")
    return {
      reason: "child",
      detail: job.child !== undefined ? `waiting for child flow ${job.child} to end` : "starting its child flow",
    };
  if (job.deadline?.kind === "expand") return { reason: "map", detail: "expanding: its instances are being made" };
  if (job.instances && job.status === "started") {
    const open = job.instances.filter((id) => !ENDED.has(state.jobs.job(id).status)).length;
    return { reason: "map", detail: `waiting for ${open} of its ${job.instances.length} instances` };
  }
  if (job.status !== "dispatched") return undefined;
  if (job.deadline?.kind === "retry") {
    return {
      reason: "backoff",
      detail: `attempt ${job.attempt} failed; attempt ${job.attempt + 1} runs after a backoff`,
      until: secs(job.deadline.at),
    };
  }
  if (job.delivery?.state === "assigned")
    return { reason: "delivering", detail: `being delivered to runner ${job.delivery.runnerId}` };
  return undefined;
}

/** The jobs whose attempt waits for a runner (dispatched, not assigned, not backing off). */
export function waitingForRunner(state: FlowState): JobState[] {
  if (!moving(state)) return [];
  return state.order
    .map((id) => state.jobs.job(id))
    .filter((job) => job.status === "dispatched" && !job.delivery && job.deadline?.kind !== "retry");
}

/**
 * A job's times to the millisecond, for views that show durations: when its current (or last)
 * attempt was queued for a runner, when it began (the runner's start report, else its delivery;
 * a wait's, a sleep's, a map's or a child flow's start), when it ended and how long it ran.
 * An ended job rebuilt from storage has lost its start (only Redis's records are left): it is
 * its end less the duration its record kept.
 */
export function jobTimes(
  job: JobState,
): Pick<JobView, "queued_at_ms" | "started_at_ms" | "ended_at_ms" | "duration_ms"> {
  const delivered = job.delivery && job.delivery.state !== "assigned" ? job.delivery.at : undefined;
  const ended = ENDED.has(job.status) ? job.endedAt : undefined;
  // An ended job's delivery may be its record's end (rebuilt), not when it was delivered.
  const fallback = ended === undefined ? delivered : job.durationMs !== undefined ? ended - job.durationMs : undefined;
  // A job that never had an attempt (skipped, or not run: its dependency failed) has no start.
  const began = job.attempt === 0 && job.startedAt === undefined ? undefined : (job.startedAt ?? fallback);
  return {
    ...(job.queuedAt !== undefined && job.attempt > 0 ? { queued_at_ms: job.queuedAt } : {}),
    ...(began !== undefined ? { started_at_ms: began } : {}),
    ...(ended !== undefined ? { ended_at_ms: ended } : {}),
    ...(ended !== undefined && began !== undefined ? { duration_ms: Math.max(0, ended - began) } : {}),
  };
}

function jobView(state: FlowState, job: JobState, dispatch: Map<number, JobWaiting>): JobView {
  const waiting = ownWaiting(state, job) ?? dispatch.get(job.id);
  return {
    id: job.id,
    ...(job.name ? { name: job.name } : {}),
    key: jobKey(job),
    kind: jobKind(job.spec),
    ...(job.spec.script_type !== undefined ? { script_type: job.spec.script_type } : {}),
    status: job.status,
    ...kindView(state, job),
    attempt: job.attempt,
    depends: job.depends,
    ...(job.delivery ? { runner_id: job.delivery.runnerId, delivery: job.delivery.state } : {}),
    ...(job.startedAt !== undefined ? { started_at: secs(job.startedAt) } : {}),
    ...(job.heartbeatAt !== undefined ? { heartbeat_at: secs(job.heartbeatAt) } : {}),
    ...jobTimes(job),
    ...(job.result ? { result: job.result } : {}),
    ...(job.error ? { error: job.error } : {}),
    ...(waiting ? { waiting } : {}),
  };
}

/**
 * What a job that runs no script does (its wait, its sleep, its child flow, its map and
 * instances), how it joined the flow if it did while the flow ran, its rules, and why it was
 * skipped.
 */
function kindView(state: FlowState, job: JobState): Partial<JobView> {
  const { wait, flow, map, when, needs, allow_failure } = job.spec;
  return {
    ...(wait ? { wait: { event: wait.event, key: waitKeyOf(state, job), timeout: wait.timeout } } : {}),
    ...(job.deadline?.kind === "sleep" ? { sleep_until: secs(job.deadline.at) } : {}),
    ...(flow ? { flow } : {}),
    ...(job.child !== undefined ? { child_flow_id: job.child } : {}),
    ...(map ? { map: { over: map.over } } : {}),
    ...(job.instances ? { instances: job.instances } : {}),
    ...jobOrigin(job),
    ...(when !== undefined ? { when } : {}),
    ...(needs !== undefined ? { needs } : {}),
    ...(allow_failure ? { allow_failure } : {}),
    ...(job.skipReason !== undefined ? { skip_reason: job.skipReason } : {}),
    ...(job.spec.compensates !== undefined ? { compensates: job.spec.compensates } : {}),
  };
}

/** How a job joined its flow while it ran (a map's instance, a job a result added), if it did. */
export function jobOrigin(job: JobState): { map_of?: number; item_index?: number; added_by?: number } {
  return {
    ...(job.mapOf !== undefined ? { map_of: job.mapOf } : {}),
    ...(job.itemIndex !== undefined ? { item_index: job.itemIndex } : {}),
    ...(job.addedBy !== undefined ? { added_by: job.addedBy } : {}),
  };
}

/**
 * The API's view of the machine's state. Times are epoch seconds. `dispatch` holds, for jobs
 * waiting for a runner, why (as the context's dispatcher explains it).
 */
export function flowView(state: FlowState, dispatch: Map<number, JobWaiting> = new Map()): FlowView {
  const jobs = state.order.map((id) => jobView(state, state.jobs.job(id), dispatch));
  const progress = progressCount(jobs.map((job) => job.status));
  const due = nearestDeadline(state);
  return {
    id: state.id,
    context_id: state.contextId,
    caller_id: state.callerId,
    status: state.status,
    run: currentRun(state),
    env_vars: state.envVars,
    result: flowResult(state),
    ...(state.error ? { error: state.error } : {}),
    ...skippedOf(state),
    trace_id: state.traceId,
    priority: state.priority,
    ...(state.maxParallel !== undefined ? { max_parallel: state.maxParallel } : {}),
    ...(state.startedAt !== undefined ? { started_at: secs(state.startedAt), started_at_ms: state.startedAt } : {}),
    ...(state.compensatingAt !== undefined ? { compensating_at: secs(state.compensatingAt) } : {}),
    ...(state.endedAt !== undefined ? { ended_at: secs(state.endedAt), ended_at_ms: state.endedAt } : {}),
    ...(due ? { next_deadline: secs(due.at) } : {}),
    ...(state.template ? { template: state.template } : {}),
    ...(state.parent ? { parent: state.parent } : {}),
    ...state.identity,
    progress,
    jobs,
  };
}
