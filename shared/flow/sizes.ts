import { formatBytes, jsonBytes, SIZE_LIMITS } from "../model/index.js";
import type { FlowState } from "./state.js";

/** What a flow may keep and give its jobs (SIZE_LIMITS, docs/limits.md), as the machine checks it. */

/**
 * Why a result of `size` bytes cannot be kept, the flow's results being `flowBytes`: bigger than a
 * result may be, or bigger than what is left of the flow's room for results (SIZE_LIMITS, docs/limits.md); undefined when it fits.
 */
export function resultRefusal(flowBytes: number, size: number): string | undefined {
  if (size > SIZE_LIMITS.result)
    return `its result is ${formatBytes(size)}, over the limit of ${formatBytes(SIZE_LIMITS.result)} for a result (docs/limits.md)`;
  const total = flowBytes + size;
  if (total > SIZE_LIMITS.flowResults)
    return `its result of ${formatBytes(size)} would take the flow's results to ${formatBytes(total)}, over the limit of ${formatBytes(SIZE_LIMITS.flowResults)} for a flow (docs/limits.md)`;
  return undefined;
}

/**
 * The size of the flow's results together (JSON bytes of every finished job's result), kept in
 * the state from the first time it is needed: a state read back from storage does not carry it.
 */
export function flowResultBytes(flow: FlowState): number {
  if (flow.resultBytes !== undefined) return flow.resultBytes;
  let total = 0;
  for (const id of flow.order) {
    const job = flow.jobs.job(id);
    if (job.status === "finished") total += jsonBytes(job.result ?? {});
  }
  return total;
}

/** Why a job is not run: its inputs, `size` bytes, are more than a job may be given. */
export function inputsRefusal(size: number): string {
  return `not run: its inputs (its dependencies' results) are ${formatBytes(size)}, over the limit of ${formatBytes(SIZE_LIMITS.inputs)} (docs/limits.md)`;
}
