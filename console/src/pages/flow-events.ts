import type { FlowStreamEvent, FlowView, JobStatus, JobView } from "../../../shared/model/index.js";

/*
 * What the flow's stream tells, applied to the page's view of the flow: a job's event to its
 * job, and a job that joined the flow to the view's jobs.
 */

/** The statuses a job ends in: nothing waits any more. */
const ENDED: ReadonlySet<string> = new Set<JobStatus>(["finished", "error", "skipped"]);

/**
 * What a job event tells of its job, applied to the job's view: its status, attempt and runner,
 * and by its type what the job now waits for (`job.wait_started`: the event and its key, until
 * its timeout; `job.sleep_started`: until when), why it was skipped (`job.skipped`), its result
 * or error. The view read again after it (at most once a second) agrees.
 */
export function applyJobEvent(job: JobView, event: FlowStreamEvent): void {
  job.status = event.status as JobStatus;
  if (event.attempt !== undefined) job.attempt = event.attempt;
  if (event.runner_id !== undefined) job.runner_id = event.runner_id;
  const until = event.until_ms === undefined ? undefined : Math.floor(event.until_ms / 1000);
  switch (event.type) {
    case "job.wait_started": {
      const name = event.event_name ?? job.wait?.event ?? "";
      const key = event.event_key ?? job.wait?.key ?? "";
      job.wait = { event: name, key, timeout: job.wait?.timeout ?? 0 };
      job.started_at = Math.floor(event.at_ms / 1000);
      job.waiting = {
        reason: "event",
        detail: `waiting for event ${name} with key ${JSON.stringify(key)}`,
        ...(until !== undefined ? { until } : {}),
      };
      break;
    }
    case "job.sleep_started":
      if (until !== undefined) job.sleep_until = until;
      job.started_at = Math.floor(event.at_ms / 1000);
      job.waiting = { reason: "sleep", detail: "sleeping", ...(until !== undefined ? { until } : {}) };
      break;
    case "job.skipped":
      job.skip_reason = event.reason ?? job.skip_reason ?? "";
      break;
    case "job.finished":
      if (event.result) job.result = event.result;
      break;
    case "job.error":
      if (event.error) job.error = event.error;
      break;
  }
  if (ENDED.has(job.status)) delete job.waiting;
  if (job.status !== "skipped") delete job.skip_reason; // a re-run gives a skipped job its chance again
}

/**
 * A job that joined a flow while it ran (`job.added`: a map's instance, a job a result added),
 * put into the page's view of the flow as the stream tells it, its map knowing it as an instance.
 * False when the event says nothing new (a job the view has already).
 */
export function addJoined(view: FlowView, event: FlowStreamEvent): boolean {
  const added = event.job;
  const id = event.job_id;
  if (!added || id === undefined || view.jobs.some((j) => j.id === id)) return false;
  view.jobs.push({ id, ...added, status: event.status as JobStatus, attempt: event.attempt ?? 0 });
  const map = added.map_of !== undefined ? view.jobs.find((j) => j.id === added.map_of) : undefined;
  if (map) map.instances = [...(map.instances ?? []), id];
  return true;
}
