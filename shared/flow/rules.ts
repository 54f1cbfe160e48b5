import { compensationReadiness, isCompensation } from "./compensation.js";
import { ENDED } from "./draft.js";
import { jobKey, type FlowState, type JobState } from "./state.js";

/**
 * A flow's rules for when a job runs: its `needs`, by how its dependencies ended. Pure, and
 * costs the job's dependencies (read when one of them ends), not the flow's size.
 */

/** What a waiting job's dependencies say: run it, skip it (why), or nothing yet (undefined). */
export type Verdict = { run: true } | { skip: string } | undefined;

const RUN: Verdict = { run: true };

/** How a dependency ended, as a skip reason says it. */
function ending(dep: JobState): string {
  return dep.status === "skipped" ? "was skipped" : "ended in error";
}

/**
 * Whether a job waiting for its dependencies may run now, by its `needs`:
 * - `all_finished` (the default): once every one finished; skipped once one ended otherwise;
 * - `all_done`: once every one ended, however;
 * - `any_finished`: as soon as one finished; skipped once all ended and none finished;
 * - `none_failed`: once every one ended and none in error (skipped ones allowed); skipped once
 *   one ended in error.
 * A job without dependencies runs at once. (A dependency that failed the flow stops its
 * dependents before this is asked: see `fail`.) A compensation has rules of its own
 * (`compensationReadiness`).
 */
export function readiness(flow: FlowState, job: JobState): Verdict {
  if (isCompensation(job)) return compensationReadiness(flow, job);
  if (job.depends.length === 0) return RUN;
  const deps = job.depends.map((id) => flow.jobs.job(id));
  const allEnded = deps.every((dep) => ENDED.has(dep.status));
  switch (job.spec.needs ?? "all_finished") {
    case "all_finished": {
      const other = deps.find((dep) => ENDED.has(dep.status) && dep.status !== "finished");
      if (other) return { skip: `dependency ${jobKey(other)} ${ending(other)} (needs: all_finished)` };
      return allEnded ? RUN : undefined;
    }
    case "all_done":
      return allEnded ? RUN : undefined;
    case "any_finished":
      if (deps.some((dep) => dep.status === "finished")) return RUN;
      return allEnded ? { skip: "no dependency finished (needs: any_finished)" } : undefined;
    case "none_failed": {
      const failed = deps.find((dep) => dep.status === "error");
      if (failed) return { skip: `dependency ${jobKey(failed)} ended in error (needs: none_failed)` };
      return allEnded ? RUN : undefined;
    }
  }
}

/** Whether a job still runs once its flow failed: a clean-up (`needs: all_done`) does. */
export function runsAfterFailure(job: JobState): boolean {
  return job.spec.needs === "all_done";
}

/** A flow's clean-up jobs, by its order (the same array in every state of one flow). */
const cleanupsByOrder = new WeakMap<readonly number[], number[]>();

/**
 * The flow's clean-up jobs (`needs: all_done`), found once per flow: a job's rules never change,
 * so a failing flow asks about these few at each end, not about every job.
 */
export function cleanups(flow: Pick<FlowState, "order" | "jobs">): number[] {
  let ids = cleanupsByOrder.get(flow.order);
  if (!ids) {
    ids = flow.order.filter((id) => runsAfterFailure(flow.jobs.job(id)));
    cleanupsByOrder.set(flow.order, ids);
  }
  return ids;
}
