import type { FlowStreamEvent, FlowView, JobStatus } from "../../../shared/model/index.js";

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
