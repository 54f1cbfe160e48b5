import type { FlowStreamEvent, FlowView, JobView } from "../../shared/model/index.js";
import { jobWords, type PlainStatus } from "./status-words.js";

/**
 * What the timeline draws: every attempt of every job, when it was queued for a runner, when it
 * began and ended, and how it went, in plain words. It is told by the flow's events (each carries
 * its instant, `at_ms`) and seeded from the flow's view (each job's current attempt, to the
 * millisecond). Events may come in any order (the flow's history is read after the live events
 * began): each time is set by the event that tells it, and an attempt's status only by an event
 * later (by `seq`) than the one that set it last. Pure, apart from the DOM: no I/O, no clock.
 */

/** One attempt of a job, as a bar. */
export interface Attempt {
  attempt: number;
  /** The run of the flow it belongs to (1 the first). */
  run: number;
  /** Epoch ms: waiting for a runner since; delivered; reported started by its runner; ended. */
  queued?: number;
  delivered?: number;
  started?: number;
  ended?: number;
  word: PlainStatus;
  why?: string;
  /** The `seq` of the event that set `word` (a seed counts as its view's `last_seq`). */
  seq: number;
}

/** When an attempt began: its runner's start report, else its delivery. */
export function begunAt(attempt: Attempt): number | undefined {
  return attempt.started ?? attempt.delivered;
}

/** The plain word an event leaves its attempt in, or undefined for an event that does not move it. */
function wordOf(event: FlowStreamEvent): { word: PlainStatus; why?: string } | undefined {
  const why = event.error ?? event.reason;
  switch (event.type) {
    case "job.ready":
    case "job.dispatched":
      return { word: "queued" };
    case "job.delivered":
    case "job.started":
    case "job.heartbeat":
    case "job.logs":
    case "job.child_started":
      return { word: "running" };
    // A wait or a sleep holds no runner: it waits (plain-status.ts).
    case "job.wait_started":
    case "job.sleep_started":
      return { word: "waiting" };
    case "job.finished":
      return { word: "finished" };
    case "job.retry_scheduled":
      return why ? { word: "failed", why } : { word: "failed" };
    case "job.skipped":
      return why ? { word: "not run", why } : { word: "not run" };
    case "job.error":
      return jobWords({ status: "error", attempt: event.attempt ?? 1, ...(why ? { error: why } : {}) });
    default:
      return undefined;
  }
}

export class Attempts {
  private readonly jobs = new Map<number, Map<number, Attempt>>();
  /** Bumped by every change: the timeline draws again when it moved. */
  version = 0;

  /** The attempts of a job, in order. */
  of(jobId: number): Attempt[] {
    return [...(this.jobs.get(jobId)?.values() ?? [])].sort((a, b) => a.attempt - b.attempt);
  }

  private attempt(jobId: number, n: number, run: number, word: PlainStatus): Attempt {
    let attempts = this.jobs.get(jobId);
    if (!attempts) this.jobs.set(jobId, (attempts = new Map()));
    let found = attempts.get(n);
    if (!found) attempts.set(n, (found = { attempt: n, run, word, seq: 0 }));
    return found;
  }

  /** Takes what the view says of each job's current attempt, where no event said it already. */
  seed(view: FlowView): void {
    const seq = view.last_seq ?? 0;
    for (const job of view.jobs) this.seedJob(job, view.run, seq);
    this.version++;
  }

  private seedJob(job: JobView, run: number, seq: number): void {
    // A job not run yet, or never run (skipped, its dependency failed), has no attempt to draw.
    if (job.attempt === 0 || (job.started_at_ms === undefined && job.queued_at_ms === undefined)) return;
    // Waiting out a retry's backoff, the job's attempt is the one that failed (the next is not made yet).
    const backoff = job.waiting?.reason === "backoff";
    const words: { word: PlainStatus; why?: string } = backoff
      ? { word: "failed", ...(job.error ? { why: job.error } : {}) }
      : jobWords(job);
    const a = this.attempt(job.id, job.attempt, run, words.word);
    // An attempt told ended keeps its end's word: the view's may be the job's next step.
    if (a.seq <= seq && (a.ended === undefined || backoff || job.ended_at_ms !== undefined)) {
      a.word = words.word;
      if (words.why) a.why = words.why;
      else delete a.why;
      a.seq = seq;
    }
    if (job.queued_at_ms !== undefined) a.queued ??= job.queued_at_ms;
    if (job.started_at_ms !== undefined && begunAt(a) === undefined) a.started = job.started_at_ms;
    if (job.ended_at_ms !== undefined) a.ended ??= job.ended_at_ms;
  }

  /** Applies one event of the flow's stream; true when it changed an attempt. */
  apply(event: FlowStreamEvent): boolean {
    const words = wordOf(event);
    const n = event.attempt;
    if (!words || event.job_id === undefined || n === undefined || n === 0) return false;
    const a = this.attempt(event.job_id, n, event.run ?? 1, words.word);
    const at = event.at_ms;
    if (event.type === "job.ready") a.queued = Math.min(a.queued ?? at, at);
    if (event.type === "job.delivered") a.delivered = Math.min(a.delivered ?? at, at);
    if (event.type === "job.started" || event.type === "job.wait_started" || event.type === "job.sleep_started")
      a.started = at;
    const ends = ["job.finished", "job.error", "job.skipped", "job.retry_scheduled"];
    if (ends.includes(event.type)) a.ended = at;
    if (event.seq >= a.seq) {
      a.word = words.word;
      if (words.why) a.why = words.why;
      else if (words.word !== "running" && words.word !== "waiting") delete a.why;
      a.seq = event.seq;
    }
    this.version++;
    return true;
  }

  /** The earliest and latest instants any attempt knows of (for the time axis). */
  span(): { from: number; to: number } | undefined {
    let from = Number.POSITIVE_INFINITY;
    let to = Number.NEGATIVE_INFINITY;
    for (const attempts of this.jobs.values())
      for (const a of attempts.values())
        for (const t of [a.queued, a.delivered, a.started, a.ended])
          if (t !== undefined) {
            from = Math.min(from, t);
            to = Math.max(to, t);
          }
    return from <= to ? { from, to } : undefined;
  }
}
