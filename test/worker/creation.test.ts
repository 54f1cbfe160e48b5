import { runInDurableObject } from "cloudflare:test";
import { afterAll, describe, expect, it } from "vitest";
import type { FlowScope } from "../../functions/core/scopes.js";
import { storeFor } from "../../functions/core/store.js";
import { GroupCommit, type CommitHost } from "../../functions/flow/group-commit.js";
import { PendingCommits, type PendingCommit } from "../../functions/flow/pending.js";
import { rebuildFlow } from "../../functions/flow/stored.js";
import { createdChange } from "../../shared/flow/changes.js";
import type { FlowEvent, FlowState } from "../../shared/flow/index.js";
import { ConflictError, StorageUnavailableError, type Store } from "../../shared/store/index.js";
import { flowOf, shJob, unreachableStore } from "./flow-fixtures.js";
import { testWorker } from "./harness.js";

// A flow submitted with `start`: GroupCommit.createWith stores it and its start in one script
// call (createFlow running the start's commit sections), in a real Durable Object's storage
// against real Redis. The call is idempotent like a commit, so an unknown outcome leaves it
// pending and it is run again; another flow under the id makes it write nothing.

const w = testWorker("creation");
afterAll(() => w.cleanup());

const store = storeFor(w.env);
const away = unreachableStore(w.keys);
const T = Date.now();
const start: FlowEvent = { type: "start", at: T };
let nextContext = 1;

function newFlow(traceId?: string): {
  state: FlowState;
  scope: FlowScope;
  stub: ReturnType<typeof w.flowStub>["stub"];
} {
  const contextId = nextContext++;
  const state = flowOf(contextId, [shJob(1, "a"), shJob(2, "b"), shJob(3, "c", [1])]);
  return { state: traceId ? { ...state, traceId } : state, ...w.flowStub(contextId, 1) };
}

function hostFor(
  storage: DurableObjectStorage,
  scope: FlowScope,
  use: { store: Store; beforeRebuild?: () => Promise<void> },
) {
  const told = { published: [] as string[], resolved: [] as PendingCommit[], committed: 0, down: 0 };
  const host: CommitHost = {
    storage,
    store: () => use.store,
    rebuild: async (journal) => {
      const read = await rebuildFlow(use.store, scope, journal);
      await use.beforeRebuild?.();
      return read;
    },
    publish: (_state, changes) => told.published.push(...changes.map((c) => c.type)),
    reloaded: () => undefined,
    afterCommit: async () => {
      told.committed++;
    },
    afterSettle: async (plan) => {
      told.resolved.push(plan);
    },
    storageDown: async () => {
      told.down++;
    },
    storageUp: () => undefined,
  };
  return { host, told };
}

const queued = (state: FlowState) => w.redis.exec<number>(["LLEN", w.keys.queue(state.contextId, "sh", state.id)]);
const flowStatus = (state: FlowState) =>
  w.redis.exec<string | null>(["HGET", w.keys.flow(state.contextId, state.id), "status"]);

describe("a flow created and started in one script call", () => {
  it("is stored started, its ready jobs queued, and told created then started", async () => {
    const { state, scope, stub } = newFlow();
    await runInDurableObject(stub, async (_instance, ds) => {
      const { host, told } = hostFor(ds.storage, scope, { store });
      const commits = new GroupCommit(host);
      const t = await commits.createWith(state, [], createdChange(state, T), start);
      expect(t.outcome).toBe("applied");
      expect(commits.current?.status).toBe("started");
      expect(await flowStatus(state)).toBe("started");
      expect(await queued(state)).toBe(2); // a and b; c waits for a
      expect(told.published.slice(0, 2)).toEqual(["flow.created", "flow.started"]);
      expect(told.committed).toBe(1);
      expect(await new PendingCommits(ds.storage).read()).toBeUndefined();
      // Read back from Redis alone, it is the same flow.
      expect((await rebuildFlow(store, scope, {}))?.status).toBe("started");
    });
  });

  it("stays pending when the outcome is unknown, and is created once when run again", async () => {
    const { state, scope, stub } = newFlow();
    await runInDurableObject(stub, async (_instance, ds) => {
      const use = { store: away };
      const { host, told } = hostFor(ds.storage, scope, use);
      const commits = new GroupCommit(host);
      await expect(commits.createWith(state, [], createdChange(state, T), start)).rejects.toBeInstanceOf(
        StorageUnavailableError,
      );
      expect(commits.current).toBeUndefined();
      const plan = await new PendingCommits(ds.storage).read();
      expect(plan?.creates).toEqual([1, 2, 3]);

      use.store = store;
      expect(await commits.settlePending()).toBe(true);
      expect(told.resolved).toHaveLength(1);
      expect(await flowStatus(state)).toBe("started");
      expect(await queued(state)).toBe(2);
      // Run once more (as if the first call had landed after all): nothing is written twice.
      expect((await store.flows.commit(plan as PendingCommit)).skipped).toEqual([1]);
      expect(await queued(state)).toBe(2);
      expect((await commits.load())?.status).toBe("started");
    });
  });

  it("writes nothing when another flow holds the id", async () => {
    const { state, scope, stub } = newFlow();
    // The same trace id (a client resends its traceparent): still another creation.
    expect(await store.flows.create(state, [], T)).toBe(true);
    await runInDurableObject(stub, async (_instance, ds) => {
      const { host, told } = hostFor(ds.storage, scope, { store });
      const commits = new GroupCommit(host);
      const refused = commits.createWith(state, [], createdChange(state, T), start);
      await expect(refused).rejects.toBeInstanceOf(ConflictError);
      await expect(refused).rejects.toMatchObject({ kind: "flow" });
      expect(commits.current).toBeUndefined();
      expect(await flowStatus(state)).toBe("dispatched");
      expect(await queued(state)).toBe(0);
      expect(told).toMatchObject({ committed: 0, down: 0, published: [] });
      expect(await new PendingCommits(ds.storage).read()).toBeUndefined();
    });
  });

  it("is not taken back by a read of the flow begun before it was stored", async () => {
    const { state, scope, stub } = newFlow();
    await runInDurableObject(stub, async (_instance, ds) => {
      let answer!: () => void;
      const gate = new Promise<void>((resolve) => (answer = resolve));
      const { host } = hostFor(ds.storage, scope, { store, beforeRebuild: () => gate });
      const commits = new GroupCommit(host);
      // A view on the fresh object reads the flow: not there yet; its answer is held back.
      const reading = commits.load();
      await commits.createWith(state, [], createdChange(state, T), start);
      answer();
      expect((await reading)?.status).toBe("started");
      expect(commits.current?.status).toBe("started");
    });
  });
});
