import type { FlowState } from "./state.js";

/**
 * What one run of a flow (or of a job outside any flow) adds to its context's figures, counted
 * once when it ends and pushed as one compact record onto the context's figures list; a scrape
 * of /metrics folds pending records into the context's counters (shared/store/metrics-store.ts).
 *
 * Every field is a count or a sum of milliseconds, and an array is a histogram's counts per
 * bucket (not cumulative: the scrape renders them cumulative), so folding is adding field by
 * field: a number to the counter of its name, the i-th count of an array to `<name>:<i>`. New
 * fields therefore need no change to the fold.
 */
export interface FlowFigures {
  /** Jobs that ran in this run and ended finished. */
  finished: number;
  /** Jobs that ran in this run and ended in error (out of retries, or timed out for good). */
  error: number;
  /** Jobs that ran in this run and never ended: the flow was cancelled while they ran or waited. */
  stopped: number;
  /** Attempts beyond each job's first in this run. */
  retries: number;
  /** Dispatch latency (queued → delivered) of each job's last attempt: counts per LATENCY_BUCKETS bucket, then +Inf. */
  latency: number[];
  /** Sum of those latencies, ms. */
  latency_ms: number;
  /** Duration (delivered → end) of each job's last attempt: counts per DURATION_BUCKETS bucket, then +Inf. */
  duration: number[];
  /** Sum of those durations, ms. */
  duration_ms: number;
}

/**
 * Upper bounds (seconds, inclusive: Prometheus' `le`) of the dispatch-latency buckets. From a
 * delivery that waited on nothing (tens of ms) to work queued behind busy runners for minutes.
 */
export const LATENCY_BUCKETS: readonly number[] = [0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300];

/** Upper bounds (seconds) of the job-duration buckets: from a shell one-liner to an hour's work. */
export const DURATION_BUCKETS: readonly number[] = [0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600];

/**
 * The figures of a flow's run that just ended, or undefined when no job ran in it (a flow
 * cancelled before any dispatch). Counts only jobs that ran in this run (`attempt > attemptFloor`:
 * a re-run counts the jobs it ran again, not the ones kept from before). Pure: the caller pushes
 * the record in the same commit that ends the flow, so a repeated end never counts twice.
 */
export function flowFigures(state: FlowState): FlowFigures | undefined {
  const figures: FlowFigures = {
    finished: 0,
    error: 0,
    stopped: 0,
    retries: 0,
    latency: new Array<number>(LATENCY_BUCKETS.length + 1).fill(0),
    latency_ms: 0,
    duration: new Array<number>(DURATION_BUCKETS.length + 1).fill(0),
    duration_ms: 0,
  };
  let ran = 0;
  for (const id of state.order) {
    const job = state.jobs.job(id);
    if (job.attempt <= job.attemptFloor) continue;
    ran++;
    if (job.status === "finished") figures.finished++;
    else if (job.status === "error") figures.error++;
    else figures.stopped++;
    figures.retries += job.attempt - job.attemptFloor - 1;
    if (job.latencyMs !== undefined) figures.latency_ms += observe(figures.latency, LATENCY_BUCKETS, job.latencyMs);
    if (job.durationMs !== undefined)
      figures.duration_ms += observe(figures.duration, DURATION_BUCKETS, job.durationMs);
  }
  return ran > 0 ? figures : undefined;
}

/** Counts `ms` in the first bucket whose bound holds it (the last, +Inf, otherwise); returns what it adds to the sum. */
function observe(counts: number[], bounds: readonly number[], ms: number): number {
  const whole = Math.max(0, Math.round(ms));
  const at = bounds.findIndex((le) => whole <= le * 1000);
  const slot = at < 0 ? bounds.length : at;
  counts[slot] = (counts[slot] ?? 0) + 1;
  return whole;
}
