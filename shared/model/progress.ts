import type { JobStatus } from "./enums.js";
import type { FlowView } from "./views.js";

/**
 * How many of `statuses` are in each status, and their total: a flow's `progress`. On its own
 * (types only), so the console counts with it without taking zod into its bundle.
 */
export function progressCount(statuses: Iterable<JobStatus>): FlowView["progress"] {
  const progress: FlowView["progress"] = {
    total: 0,
    dispatched: 0,
    waiting_for_prerequisites: 0,
    started: 0,
    finished: 0,
    error: 0,
    skipped: 0,
  };
  for (const status of statuses) {
    progress[status]++;
    progress.total++;
  }
  return progress;
}
