import { jobKey, nearestDeadline, type FlowState, type JobState } from "../../shared/flow/index.js";
import type { FlowView, JobView } from "../../shared/model/index.js";

export type { FlowView, JobView };

function jobView(job: JobState): JobView {
  return {
    id: job.id,
    ...(job.name ? { name: job.name } : {}),
    key: jobKey(job),
    script_type: job.spec.script_type,
    status: job.status,
    attempt: job.attempt,
    dependends: job.dependends,
    ...(job.delivery ? { runner_id: job.delivery.runnerId, delivery: job.delivery.state } : {}),
    ...(job.result ? { result: job.result } : {}),
    ...(job.error ? { error: job.error } : {}),
  };
}

/** The API's view of the machine's state. Times are epoch seconds. */
export function flowView(state: FlowState): FlowView {
  const jobs = state.order.map((id) => jobView(state.jobs[id] as JobState));
  const progress = { total: jobs.length, dispatched: 0, waiting_for_prerequisites: 0, started: 0, finished: 0, error: 0 };
  for (const job of jobs) progress[job.status]++;
  const due = nearestDeadline(state);
  const secs = (ms: number | undefined) => (ms === undefined ? undefined : Math.floor(ms / 1000));
  return {
    id: state.id,
    context_id: state.contextId,
    caller_id: state.callerId,
    status: state.status,
    env_vars: state.envVars,
    result: state.result,
    ...(state.error ? { error: state.error } : {}),
    trace_id: state.traceId,
    ...(state.startedAt !== undefined ? { started_at: secs(state.startedAt) as number } : {}),
    ...(state.endedAt !== undefined ? { ended_at: secs(state.endedAt) as number } : {}),
    ...(due ? { next_deadline: secs(due.at) as number } : {}),
    progress,
    jobs,
  };
}
