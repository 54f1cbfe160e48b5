import { afterAll, expect } from "vitest";
import type { FlowScope } from "../../functions/core/scopes.js";
import { storeFor } from "../../functions/core/store.js";
import type { CommitHost, Committed } from "../../functions/flow/group-commit.js";
import type { PendingCommit } from "../../functions/flow/pending.js";
import { rebuildFlow } from "../../functions/flow/stored.js";
import type { FlowEvent, FlowState } from "../../shared/flow/index.js";
import type { Store } from "../../shared/store/index.js";
import { flowOf, shJob, unreachableStore } from "./flow-fixtures.js";
import { testWorker } from "./harness.js";

// What the GroupCommit tests share: a real Durable Object's storage (for the pending plan and
// the journal), real Redis through the Store, and a host whose callbacks only record what they
// were told.

export const CALLER = 9;
export const RUNNER = 4;
export const T = Date.now();

export const start: FlowEvent = { type: "start", at: T };
export const assigned = (jobId: number): FlowEvent => ({
  type: "assigned",
  job: jobId,
  attempt: 1,
  runner: RUNNER,
  at: T + 10,
});
export const finished = (jobId: number): FlowEvent => ({
  type: "finished",
  job: jobId,
  attempt: 1,
  runner: RUNNER,
  result: { done: String(jobId) },
  at: T + 20,
});

/** What the host was told, in order. */
export interface Told {
  committed: Committed[];
  resolved: PendingCommit[];
  down: number;
  up: number;
  /** Calls of host.store(): one to plan each batch that has steps, one per script call. */
  storeCalls: number;
  /** The stream events of durable batches, by type. */
  published: string[];
  /** States read back from storage (the stream catches up with each). */
  reloaded: number;
}

/** A test Worker under `prefix` (cleaned up after the file), and what the tests build on it. */
export function groupCommitFixture(prefix: string) {
  const w = testWorker(prefix);
  afterAll(() => w.cleanup());

  /** The Store of this file's prefix. */
  const store = storeFor(w.env);
  /** A Store whose endpoint nothing listens at: every call fails, its outcome unknown to the caller. */
  const away = unreachableStore(w.keys);

  let nextContext = 1;
  /** A context id no other test of the file used. */
  const newContextId = () => nextContext++;

  /** A new flow of independent jobs a, b, c (ids 1..3), created in Redis, and its object's stub. */
  async function newFlow(): Promise<{
    state: FlowState;
    scope: FlowScope;
    stub: ReturnType<typeof w.flowStub>["stub"];
  }> {
    const contextId = newContextId();
    const state = flowOf(contextId, [shJob(1, "a"), shJob(2, "b"), shJob(3, "c")], { callerId: CALLER });
    expect(await store.flows.create(state, [], T)).toBe(true);
    return { state, ...w.flowStub(contextId, 1) };
  }

  /**
   * A host over `storage` whose Store is `use.store` (a test swaps it to take storage away and
   * back); `onStore` runs at each call of store(), which tells the test where a batch is.
   */
  function hostFor(
    storage: DurableObjectStorage,
    scope: FlowScope,
    use: { store: Store; onStore?: (call: number) => void },
  ): { host: CommitHost; told: Told } {
    const told: Told = { committed: [], resolved: [], down: 0, up: 0, storeCalls: 0, published: [], reloaded: 0 };
    const host: CommitHost = {
      storage,
      store: () => {
        told.storeCalls++;
        use.onStore?.(told.storeCalls);
        return use.store;
      },
      rebuild: (journal) => rebuildFlow(use.store, scope, journal),
      publish: (_state, changes) => told.published.push(...changes.map((c) => c.type)),
      reloaded: () => told.reloaded++,
      afterCommit: async (batch) => {
        told.committed.push(batch);
      },
      afterSettle: async (plan) => {
        told.resolved.push(plan);
      },
      storageDown: async () => {
        told.down++;
      },
      storageUp: () => {
        told.up++;
      },
    };
    return { host, told };
  }

  /** Work items of the flow waiting in its queue for sh runners. */
  const queued = (state: FlowState) => w.redis.exec<number>(["LLEN", w.keys.queue(state.contextId, "sh", state.id)]);
  const flowField = (state: FlowState, field: string) =>
    w.redis.exec<string | null>(["HGET", w.keys.flow(state.contextId, state.id), field]);
  const jobField = (state: FlowState, jobId: number, field: string) =>
    w.redis.exec<string | null>(["HGET", w.keys.job(state.contextId, CALLER, jobId), field]);

  return { w, store, away, newContextId, newFlow, hostFor, queued, flowField, jobField };
}
