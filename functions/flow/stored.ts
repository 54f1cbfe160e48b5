import { rebuildState, type FlowState, type JobState, type Journal } from "../../shared/flow/index.js";
import { ConflictError, jobRecord, type Store } from "../../shared/store/index.js";
import type { FlowScope } from "../core/scopes.js";

/*
 * A FlowCoordinator's reads and first write of its flow in Redis: what it is made of when it is
 * created, and what it is rebuilt from (with the journal of its own storage) after it lost its
 * memory. Every later write is a commit (GroupCommit).
 */

/**
 * Stores a new flow (or a job outside any flow) all or nothing. False when it exists already: a
 * retried creation, or another flow under a caller-chosen id (the caller tells them apart).
 */
export async function storeNewFlow(
  store: Store,
  scope: FlowScope,
  state: FlowState,
  chosen: number[],
): Promise<boolean> {
  if (!scope.job) return store.flows.create(state, chosen, Date.now());
  try {
    const {
      created_at: _c,
      updated_at: _u,
      ...record
    } = jobRecord(state, state.jobs[state.order[0] as number] as JobState, Date.now());
    // Without a flow record, the job keeps the timeouts it runs with (rebuildState reads them).
    await store.jobs.create({ ...record, timeouts: state.timeouts });
    return true;
  } catch (error) {
    if (error instanceof ConflictError && chosen.length === 0) return false;
    throw error;
  }
}

/** Reads the flow from Redis plus the journal of the object's storage; null when there is none. */
export async function rebuildFlow(store: Store, scope: FlowScope, journal: Journal): Promise<FlowState | null> {
  if (scope.job) {
    const { jobs, messages } = await store.flows.loadJobs(scope.contextId, scope.job.callerId, [scope.job.id]);
    return jobs.length === 0
      ? null
      : rebuildState({ flow: null, contextId: scope.contextId, callerId: scope.job.callerId, jobs, messages, journal });
  }
  const stored = await store.flows.load(scope.contextId, scope.flowId);
  return stored?.flow
    ? rebuildState({
        flow: stored.flow,
        contextId: scope.contextId,
        callerId: stored.flow.caller_id,
        jobs: stored.jobs,
        messages: stored.messages,
        journal,
      })
    : null;
}
