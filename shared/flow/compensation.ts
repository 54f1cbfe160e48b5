import type { FlowStatus } from "../model/index.js";
import { ENDED } from "./draft.js";
import { jobKey, type FlowState, type JobState } from "./state.js";

/*
 * A flow's compensations (sagas), as the machine asks about them. A job that gives `compensate`
 * has a compensation: a job of its own, after every job of the flow in its order (dag.ts), which
 * runs only while the flow unwinds: once it failed (after its clean-ups), or was cancelled with
 * `compensate`. Pure and cheap: the list is found once per flow, like its clean-ups.
 */

/** The statuses a flow ends in. */
export const FLOW_ENDED: ReadonlySet<FlowStatus> = new Set<FlowStatus>([
  "finished",
  "error",
  "compensated",
  "compensation_failed",
]);

/** Whether a job is a compensation (it runs only while its flow unwinds). */
export function isCompensation(job: Pick<JobState, "spec">): boolean {
  return job.spec.compensates !== undefined;
}

/** A flow's compensations, by its order (the same array in every state of one flow). */
const byOrder = new WeakMap<readonly number[], number[]>();

/** The flow's compensations in its order (they come after all its other jobs). */
export function compensations(flow: Pick<FlowState, "order" | "jobs">): number[] {
  let ids = byOrder.get(flow.order);
  if (!ids) {
    ids = flow.order.filter((id) => isCompensation(flow.jobs.job(id)));
    byOrder.set(flow.order, ids);
  }
  return ids;
}

/** How many of the flow's jobs, from the start of its order, are not compensations: its run. */
export function runLength(flow: Pick<FlowState, "order" | "jobs">): number {
  return flow.order.length - compensations(flow).length;
}

/** What is decided once a job ended: its dependents, and its compensation while the flow unwinds. */
export function followers(flow: Pick<FlowState, "status">, job: JobState): number[] {
  return flow.status === "compensating" && job.compensation !== undefined
    ? [...job.dependents, job.compensation]
    : job.dependents;
}

/** The compensations that ended in error (failed, or cancelled while the flow unwound), by key. */
export function failedCompensations(flow: Pick<FlowState, "order" | "jobs">): string[] {
  return compensations(flow).flatMap((id) => {
    const job = flow.jobs.job(id);
    return job.status === "error" ? [jobKey(job)] : [];
  });
}

/** How the reason of a compensation not run because the unwinding stopped before it begins. */
const STOPPED = "not run: compensation ";

/**
 * Whether a compensation was not run because one it waited for failed (or was not run in turn),
 * as its skip reason (which its record keeps) says: the unwinding stops there, whether or not it
 * had anything to undo itself.
 */
function stopped(job: JobState): boolean {
  return job.status === "skipped" && job.skipReason?.startsWith(STOPPED) === true;
}

/**
 * Whether a compensation may run now, skipped, or waits (undefined): only while the flow unwinds,
 * once the job it undoes ended and so did every compensation it waits for. One of those that
 * failed, or was not run for that, stops it (skipped: the unwinding stops there, and a re-run
 * carries it on); a job that did not finish has nothing to undo (skipped).
 */
export function compensationReadiness(flow: FlowState, job: JobState): { run: true } | { skip: string } | undefined {
  if (flow.status !== "compensating") return undefined;
  const target = flow.jobs.job(job.spec.compensates as number);
  if (!ENDED.has(target.status)) return undefined;
  const deps = job.depends.map((id) => flow.jobs.job(id));
  if (!deps.every((dep) => ENDED.has(dep.status))) return undefined;
  const failed = deps.find((dep) => dep.status === "error");
  if (failed) return { skip: `${STOPPED}${jobKey(failed)} failed` };
  const notRun = deps.find(stopped);
  if (notRun) return { skip: `${STOPPED}${jobKey(notRun)} was not run` };
  if (target.status !== "finished")
    return { skip: `nothing to undo: ${jobKey(target)} did not finish (it is ${target.status})` };
  return { run: true };
}

/** How an unwinding flow ends: compensated, or compensation_failed naming the compensations that did not end well. */
export function unwound(flow: FlowState): Pick<FlowState, "status" | "error"> {
  const failed = failedCompensations(flow);
  if (failed.length === 0) return { status: "compensated", ...(flow.error ? { error: flow.error } : {}) };
  const error = flow.error ?? { job: 0, reason: "the flow unwound" };
  return { status: "compensation_failed", error: { ...error, failed_compensations: failed } };
}
