import type { Keys } from "../../shared/keys.js";
import type { ResultMap } from "../../shared/model/index.js";
import { FlowResults } from "../../shared/store/flow-results.js";
import type { Redis } from "../../shared/store/redis.js";

/**
 * A flow's results as Redis keeps them: each finished job's, in its job's record (neither the
 * flow's record nor its result mail keeps a copy). What tests read to check that results were
 * stored, not only held by the flow's Durable Object.
 */
export function storedResults(
  stack: { redis: Redis; keys: Keys },
  contextId: number,
  callerId: number,
  flowId: number,
): Promise<Record<string, ResultMap> | undefined> {
  return new FlowResults(stack.redis, stack.keys).ofFlow(contextId, callerId, flowId);
}
