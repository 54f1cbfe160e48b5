import type { FlowState } from "../flow/index.js";
import type { Keys } from "../keys.js";
import { encodePairs } from "./codec.js";
import type { Op } from "./commit-calls.js";
import { flowEndFields } from "./flow-records.js";
import { codecs } from "./layouts.js";

/*
 * What a flow's lifecycle writes of the flow itself beside its jobs: its record and status indexes
 * when it begins to unwind (docs/flows.md, "Compensation") and when it runs again, the status it
 * leaves when it ends, and which of retention's sets keeps it once it ended. Pure; the commit's
 * sections (commit-sections.ts) take these operations.
 */

/** Which of retention's sets keeps an ended flow: `finished`, or `error` for every failure (unwound or not). */
export function endedSet(status: FlowState["status"]): "finished" | "error" | undefined {
  if (status === "finished") return "finished";
  return status === "error" || status === "compensated" || status === "compensation_failed" ? "error" : undefined;
}

/**
 * The flow began to unwind (a flow, not a job outside any flow): its status, when, and why it
 * failed (what its end will keep), and its place in the status indexes. Once, and only on a flow
 * that has not ended: guarded by "U" (scripts/flow.ts), which sets compensating_at if it is new
 * and the flow has no ended_at. `now` is the commit's time (ms).
 */
export function compensatingOps(keys: Keys, state: FlowState, now: number): Op[] {
  const id = String(state.id);
  const secs = Math.floor(now / 1000);
  const since = encodePairs(codecs.flow, { compensating_at: Math.floor((state.compensatingAt ?? now) / 1000) });
  const fields = encodePairs(codecs.flow, { status: "compensating", error: state.error, updated_at: secs });
  const was = state.startedAt === undefined ? "dispatched" : "started";
  return [
    ["U", keys.flow(state.contextId, state.id), [since[1] as string], 1],
    ["H", keys.flow(state.contextId, state.id), fields],
    ["R", keys.flowsByStatus(state.contextId, was), [id]],
    ["Z", keys.flowsByStatus(state.contextId, "compensating"), [id, id]],
  ];
}

/**
 * A job failed its flow, which runs on for its clean-ups (`needs: all_done`) before it ends or
 * unwinds: the failure is written at once (unguarded: it writes the same error however often),
 * so a flow rebuilt from storage meanwhile still knows it failed. Nothing for any other end.
 */
export function failureOps(keys: Keys, state: FlowState, jobId: number): Op[] {
  if (state.status !== "started" || state.error?.job !== jobId) return [];
  return [["H", keys.flow(state.contextId, state.id), encodePairs(codecs.flow, { error: state.error })]];
}

/**
 * The flow ended: its final status and error, and its job counts for lists (its result is never
 * copied here: the jobs' records hold it and a view gathers it), guarded by ended_at, and its
 * move between the status indexes.
 */
export function endedOps(keys: Keys, state: FlowState, secs: number): Op[] {
  const id = String(state.id);
  const final = flowEndFields(state, secs);
  return [
    ["H", keys.flow(state.contextId, state.id), encodePairs(codecs.flow, final), 1],
    ["R", keys.flowsByStatus(state.contextId, statusBefore(state)), [id]],
    ["Z", keys.flowsByStatus(state.contextId, state.status), [id, id]],
  ];
}

/** The status a flow ends from (the index it leaves): it unwound, it ran, or it never started. */
export function statusBefore(state: FlowState): "compensating" | "started" | "dispatched" {
  if (state.compensatingAt !== undefined) return "compensating";
  return state.startedAt === undefined ? "dispatched" : "started";
}

/**
 * A flow that ended (`was`) runs again: its end and error forgotten (guarded: ended_at is there
 * only the first time), its status, run, when the run began (its deadline counts from it) and env
 * (durable, so that a rebuild from Redis runs the new attempts with the env they were re-run
 * with, under the run's deadline), and its place in the status indexes. A flow
 * whose unwinding failed unwinds again: compensating, its error kept without the compensations
 * that failed.
 */
export function rerunOps(keys: Keys, state: FlowState, was: FlowState["status"], now: number): Op[] {
  const id = String(state.id);
  const flowKey = keys.flow(state.contextId, state.id);
  const unwinding = state.status === "compensating" ? { error: state.error } : {};
  const again = {
    status: state.status,
    run: state.run,
    run_started_at: Math.floor((state.runStartedAt ?? now) / 1000),
    env_vars: state.envVars,
    ...unwinding,
  };
  return [
    ["D", flowKey, ["ended_at", "error"], 1],
    ["H", flowKey, encodePairs(codecs.flow, { ...again, updated_at: Math.floor(now / 1000) })],
    ["R", keys.flowsByStatus(state.contextId, was), [id]],
    ["Z", keys.flowsByStatus(state.contextId, state.status), [id, id]],
  ];
}
