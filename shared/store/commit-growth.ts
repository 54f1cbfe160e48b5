import type { FlowState } from "../flow/index.js";
import type { Keys } from "../keys.js";
import { encodePairs } from "./codec.js";
import { jobRecord } from "./flow-records.js";
import { codecs } from "./layouts.js";

/**
 * What a commit writes when jobs join a running flow (a map's instances, jobs a result added),
 * as operations of the transition's section (commit-sections.ts): each job's whole record, as a
 * creation writes it (an instance's keeps only its item: flow-records.ts), and its index entry;
 * and the new ids appended to the flow's list of jobs ("A": what it adds, not the whole list; a
 * rebuild reads the jobs it names and puts the compensations last again, rebuild.ts). A new
 * record guards the section (HSET adds its fields only the first time: level 2, as a new
 * message), so the append is made once.
 */
export function jobsAdded(
  keys: Keys,
  state: FlowState,
  jobs: number[],
  now: number,
): ["H" | "Z" | "A", string, string[], 2?][] {
  const ctx = state.contextId;
  const ops: ["H" | "Z" | "A", string, string[], 2?][] = [];
  const members: string[] = [];
  for (const id of jobs) {
    const record = jobRecord(state, { ...state.jobs.job(id), status: "dispatched", attempt: 0 }, now);
    ops.push(["H", keys.job(ctx, state.callerId, id), encodePairs(codecs.job, record), 2]);
    members.push(String(id), `${state.callerId}:${id}`);
  }
  ops.push(["Z", keys.index(ctx, "job"), members]);
  if (state.id !== 0) {
    const flow = keys.flow(ctx, state.id);
    ops.push(["A", flow, ["jobs", JSON.stringify(jobs)]]);
    ops.push(["H", flow, encodePairs(codecs.flow, { updated_at: Math.floor(now / 1000) })]);
  }
  return ops;
}
