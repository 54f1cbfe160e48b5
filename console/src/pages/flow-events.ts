import type { FlowStreamEvent, FlowView, JobStatus, JobView } from "../../../shared/model/index.js";

/*
 * What the flow's stream tells, applied to the page's view of the flow: a job's event to its
 * job, and a job that joined the flow to the view's jobs.
 */

/** The statuses a job ends in: nothing waits any more. */
const ENDED: ReadonlySet<string> = new Set<JobStatus>(["finished", "error", "skipped"]);

/** The statuses a flow ends in. */
const FLOW_ENDED: ReadonlySet<string> = new Set(["finished", "error", "compensated", "compensation_failed"]);

/**
 * What a job event tells of its job, applied to the job's view: its status, attempt and runner,
 * and by its type what the job now waits for (`job.wait_started`: the event and its key, until
 * its timeout; `job.sleep_started`: until when), why it was skipped (`job.skipped`), its result
 * or error. The view read again after it (at most once a second) agrees.
 */
export function applyJobEvent(job: JobView, event: FlowStreamEvent): void {
  const attempt = job.attempt;
  job.status = event.status as JobStatus;
  if (event.attempt !== undefined) job.attempt = event.attempt;
  applyTimes(job, event, job.attempt !== attempt);
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
 * The job's times to the millisecond, as the view has them (functions/flow/view.ts, `jobTimes`):
 * a new attempt is queued (`job.ready`), begins at its delivery or at the runner's start report
 * (a wait's, a sleep's, a map's start), and the job ends with its end; an attempt that failed
 * into a retry, or a job made to run again, forgets its start.
 */
function applyTimes(job: JobView, event: FlowStreamEvent, newAttempt: boolean): void {
  const at = event.at_ms;
  switch (event.type) {
    case "job.ready":
      if (newAttempt || job.queued_at_ms === undefined) job.queued_at_ms = at;
      if (newAttempt) forgetRun(job);
      break;
    case "job.delivered":
      job.started_at_ms ??= at;
      break;
    case "job.started":
    case "job.wait_started":
    case "job.sleep_started":
      job.started_at_ms = at;
      break;
    case "job.retry_scheduled":
    case "job.waiting":
      forgetRun(job);
      break;
    case "job.finished":
    case "job.error":
    case "job.skipped":
      job.ended_at_ms = at;
      if (job.started_at_ms !== undefined) job.duration_ms = Math.max(0, at - job.started_at_ms);
      break;
  }
}

function forgetRun(job: JobView): void {
  delete job.started_at_ms;
  delete job.ended_at_ms;
  delete job.duration_ms;
}

/**
 * What a flow event tells of the flow, applied to the page's view of it: its status, its run,
 * when it started, began to unwind and ended (to the second and to the millisecond).
 */
export function applyFlowEvent(view: FlowView, event: FlowStreamEvent): void {
  view.status = event.status as FlowView["status"];
  const at = Math.floor(event.at_ms / 1000);
  if (event.type === "flow.started" || event.type === "flow.rerun") {
    delete view.ended_at;
    delete view.ended_at_ms;
  }
  if (event.run !== undefined) view.run = event.run;
  if (event.type === "flow.started" && view.started_at === undefined) {
    view.started_at = at;
    view.started_at_ms = event.at_ms;
  }
  if (event.type === "flow.compensating") view.compensating_at ??= at;
  if (FLOW_ENDED.has(view.status) && view.ended_at === undefined) {
    view.ended_at = at;
    view.ended_at_ms = event.at_ms;
  }
  if (event.type === "flow.cancelled" && event.reason !== undefined && !view.error)
    view.error = { job: 0, reason: `cancelled: ${event.reason}` };
}

/** Any event, applied to the view: a job's to its job, one that joined to the jobs, a flow's to the flow. */
export function applyEvent(view: FlowView, event: FlowStreamEvent): void {
  if (event.type === "job.added") addJoined(view, event);
  else if (event.job_id !== undefined) {
    const job = view.jobs.find((j) => j.id === event.job_id);
    if (job) applyJobEvent(job, event);
  } else if (event.type.startsWith("flow.")) applyFlowEvent(view, event);
}

/**
 * The events the page applied that a view read from the coordinator may not know yet: a read
 * answers the flow as it was at its `last_seq`, and may arrive after the stream told what came
 * next. Those events are applied to the view again before it is shown, so a late answer never
 * takes the page back (a node recoloured to what it was, the header's counts with it).
 */
export class Unread {
  private events: FlowStreamEvent[] = [];

  /** Keeps an event the page applied (at most the last 5,000: a read comes every second or so). */
  keep(event: FlowStreamEvent): void {
    this.events.push(event);
    if (this.events.length > 5_000) this.events.splice(0, this.events.length - 5_000);
  }

  /** Brings a view read from the coordinator up to the events the page has seen since its `last_seq`. */
  catchUp(view: FlowView): void {
    const seen = view.last_seq;
    if (seen === undefined) return;
    this.events = this.events.filter((event) => event.seq > seen);
    for (const event of this.events) applyEvent(view, event);
    view.last_seq = this.events.at(-1)?.seq ?? seen;
  }
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
