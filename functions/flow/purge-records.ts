import {
  ENDED,
  FLOW_ENDED,
  messageId,
  resultMessageId,
  type FlowState,
  type JobState,
} from "../../shared/flow/index.js";
import type { PurgeOutcome, PurgeTarget, Store } from "../../shared/store/index.js";
import type { FlowScope } from "../core/scopes.js";

/*
 * What a flow (or a job outside any flow) owns in Redis and whether it may go: pure functions of
 * its state, and the removal of its records (purge.ts wipes its object afterwards). Kept apart
 * from purge.ts because that one needs the Workers runtime's types, and these are tested under
 * Node (test/unit/purge-target.test.ts).
 */

/** The message ids a job's attempts used: this run's, and those of runs before a re-run. */
function jobMessages(job: JobState): number[] {
  const ids: number[] = [];
  for (const [from, to] of job.pastMessages ?? []) for (let id = from; id <= to; id++) ids.push(id);
  for (let attempt = job.attemptFloor + 1; attempt <= job.attempt; attempt++) ids.push(messageId(job, attempt));
  return ids;
}

/**
 * Everything the flow owns in Redis, from its state; from the scope alone when there is no state
 * (its records are gone or unreadable): then only its own record and index entries are named,
 * and a context's deletion sweeps the rest of its namespace anyway.
 */
export function purgeTarget(scope: FlowScope, state: FlowState | undefined): PurgeTarget {
  const owner = scope.job ? { callerId: scope.job.callerId, jobId: scope.job.id } : { flowId: scope.flowId };
  const callerId = state?.callerId ?? scope.job?.callerId ?? 0;
  if (!state) return { contextId: scope.contextId, owner, callerId, jobIds: [], messageIds: [] };
  const jobs = state.order.map((id) => state.jobs.job(id));
  return {
    contextId: scope.contextId,
    owner,
    callerId,
    jobIds: scope.job ? [] : state.order,
    messageIds: jobs.flatMap(jobMessages),
    ...(over(state) ? { resultId: resultMessageId(state) } : {}),
  };
}

/**
 * Whether nothing of the flow runs any more: it ended (finished, error, or unwound) and so did every job
 * (a flow that failed may still have attempts of other jobs in flight: cancel stops them). The
 * job's own status tells for a job outside any flow, which has no flow record to date its end.
 */
export function over(state: FlowState): boolean {
  return FLOW_ENDED.has(state.status) && state.order.every((id) => ENDED.has(state.jobs.job(id).status));
}

/**
 * Removes the flow's records, index entries and messages from Redis: only once it ended (the
 * script checks Redis too, so one re-run meanwhile is left alone), or whatever it is with
 * `force`. The caller then wipes the object's storage and memory (Incarnations.wipe), unless the
 * answer is `running`.
 */
export async function purgeRecords(
  store: Store,
  scope: FlowScope,
  state: FlowState | undefined,
  force: boolean,
): Promise<PurgeOutcome> {
  if (state && !force && !over(state)) return { running: state.status };
  if (!state && !force) return "gone";
  return store.retention.purge(purgeTarget(scope, state), force);
}
