import { rebuildState, type FlowState, type Journal } from "../../shared/flow/index.js";
import { ConflictError, jobRecord, type RecordToken, type Store, type StoredFlow } from "../../shared/store/index.js";
import type { FlowScope } from "../core/scopes.js";

/*
 * A FlowCoordinator's reads and first write of its flow in Redis: what it is made of when it is
 * created, and what it is rebuilt from (with the journal of its own storage) after it lost its
 * memory. Every later write is a commit (GroupCommit).
 */

/**
 * Stores a new flow (or a job outside any flow) all or nothing, with `token` as its incarnation.
 * False when it exists already: a retried creation, or another flow under a caller-chosen id
 * (the caller tells them apart).
 */
export async function storeNewFlow(
  store: Store,
  scope: FlowScope,
  state: FlowState,
  chosen: number[],
  token: string,
): Promise<boolean> {
  if (!scope.job) return store.flows.create(state, chosen, Date.now(), token);
  try {
    const {
      created_at: _c,
      updated_at: _u,
      ...record
    } = jobRecord(state, state.jobs.job(state.order[0] as number), Date.now());
    // Without a flow record, the job keeps the timeouts it runs with (rebuildState reads them).
    await store.jobs.create({ ...record, timeouts: state.timeouts }, token);
    return true;
  } catch (error) {
    if (error instanceof ConflictError && chosen.length === 0) return false;
    throw error;
  }
}

/** The flow's records in Redis (a job's, for a job outside any flow) with their incarnation token; null when there are none. */
export async function readFlow(store: Store, scope: FlowScope): Promise<StoredFlow | null> {
  if (scope.job) return store.flows.loadJob(scope.contextId, scope.job.callerId, scope.job.id);
  const stored = await store.flows.load(scope.contextId, scope.flowId);
  return stored?.flow ? stored : null;
}

/** The hash that holds the flow's incarnation token: the flow's, or the job's outside any flow. */
export function recordKey(store: Store, scope: FlowScope): string {
  return scope.job
    ? store.keys.job(scope.contextId, scope.job.callerId, scope.job.id)
    : store.keys.flow(scope.contextId, scope.flowId);
}

/** What `readFlow` found, as the record's token (one command: the flow's hash, or the job's). */
export function readRecordToken(store: Store, scope: FlowScope): Promise<RecordToken> {
  return store.flows.recordToken(recordKey(store, scope));
}

/** Reads the flow from Redis plus the journal of the object's storage, whatever incarnation; null when there is none. */
export async function rebuildFlow(store: Store, scope: FlowScope, journal: Journal): Promise<FlowState | null> {
  const stored = await readFlow(store, scope);
  return stored ? rebuildFrom(scope, stored, journal) : null;
}

/** The state of records `readFlow` found, plus the journal of the object's storage. */
export function rebuildFrom(scope: FlowScope, stored: StoredFlow, journal: Journal): FlowState {
  return rebuildState({
    flow: stored.flow,
    contextId: scope.contextId,
    callerId: stored.flow?.caller_id ?? scope.job?.callerId ?? 0,
    jobs: stored.jobs,
    messages: stored.messages,
    journal,
  });
}
