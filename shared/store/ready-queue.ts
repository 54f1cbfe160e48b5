import type { FlowState } from "../flow/index.js";
import type { Keys } from "../keys.js";
import type { ScriptType } from "../model/index.js";

/**
 * One flow's queue of ready attempts, as the context's Dispatcher keeps it in its turn order
 * (docs/dispatch.md, "Fairness"): which flow, which runners may take from it, and what the flow
 * asked for (its priority, its cap on attempts in flight). The commit that puts attempts in a
 * queue names it in its wake of the dispatcher.
 */
export interface ReadyQueue {
  /** The list's key (Keys.readyQueue). */
  key: string;
  /** The flow whose attempts wait there (0: jobs outside any flow). */
  flow: number;
  /** Runners of this script type take from it … */
  scriptType?: ScriptType;
  /** … or only this one (jobs pinned to a runner). */
  runner?: number;
  /** Higher goes first. */
  priority: number;
  /** The flow's max_parallel, if any. */
  maxParallel?: number;
}

/**
 * The queue a job of `flow` waits in when it is ready, with the flow's id, priority and cap.
 */
export function readyQueueOf(
  keys: Keys,
  flow: Pick<FlowState, "contextId" | "id" | "priority" | "maxParallel">,
  spec: { runner_id?: number | undefined; script_type: ScriptType },
): ReadyQueue {
  return {
    key: keys.readyQueue(flow.contextId, spec, flow.id),
    flow: flow.id,
    ...(spec.runner_id !== undefined ? { runner: spec.runner_id } : { scriptType: spec.script_type }),
    priority: flow.priority,
    ...(flow.maxParallel !== undefined ? { maxParallel: flow.maxParallel } : {}),
  };
}

/** Whether a runner with these script types (and this id) may take attempts from the queue. */
export function serves(queue: ReadyQueue, runner: { id: number; script_types: readonly ScriptType[] }): boolean {
  return queue.runner !== undefined
    ? queue.runner === runner.id
    : queue.scriptType !== undefined && runner.script_types.includes(queue.scriptType);
}
