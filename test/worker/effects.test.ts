import { runInDurableObject } from "cloudflare:test";
import { afterAll, describe, expect, it } from "vitest";
import type { Wake } from "../../functions/core/contracts.js";
import type { Env } from "../../functions/core/env.js";
import { dispatchScopeOf, type DispatchScope, type FlowScope } from "../../functions/core/scopes.js";
import { storeFor } from "../../functions/core/store.js";
import { FlowEffects } from "../../functions/flow/effects.js";
import type { Committed } from "../../functions/flow/group-commit.js";
import { type FlowEvent, type FlowState } from "../../shared/flow/index.js";
import { planCommit } from "../../shared/store/index.js";
import { flowOf, shJob, stepsThrough, through } from "./flow-fixtures.js";
import { testWorker } from "./harness.js";

// FlowEffects on its own: what a durable batch owes, carried out against the real Dispatcher
// Durable Object and the object's real storage (the owed wake).

const w = testWorker("effects");
afterAll(() => w.cleanup());

const store = storeFor(w.env);
const T = Date.now();
const RUNNER = 4;
const OWED = "owed-wake";

/**
 * The bindings with a DISPATCHER that cannot be reached: the stand-in for a dispatcher that is
 * away (every call to it fails before it is made).
 */
const unreachable: Env = {
  ...w.env,
  DISPATCHER: {
    idFromName: () => {
      throw new Error("the dispatcher is unreachable");
    },
    get: () => {
      throw new Error("the dispatcher is unreachable");
    },
  } as unknown as Env["DISPATCHER"],
};

let nextContext = 1;

/** A new flow of one job (id 1) in a context of its own, and its object's scope and stub. */
function newFlow(timeout = 300): { state: FlowState; scope: FlowScope; stub: ReturnType<typeof w.flowStub>["stub"] } {
  const contextId = nextContext++;
  const state = flowOf(contextId, [shJob(1, "a")], { timeout });
  return { state, ...w.flowStub(contextId, 1) };
}

/** FlowEffects of the flow at `scope`, kept in the object whose storage is `storage`, with the bindings `env`. */
function effectsOf(storage: DurableObjectStorage, scope: FlowScope, env: Env = w.env): FlowEffects {
  return new FlowEffects(env, storage, { scope: () => scope, store: () => store, dispatched: (items) => [...items] });
}

/** The batch of `events` applied to `before`, as GroupCommit hands it over once durable. */
function batchOf(before: FlowState, events: FlowEvent[]): Committed {
  const { state: after, steps } = stepsThrough(before, events);
  const plan = planCommit(store.keys, steps, T);
  return {
    before,
    after,
    steps,
    plan: plan.sections > 0 ? plan : undefined,
    claims: [],
    outcome: undefined,
    conflict: false,
  };
}

const start: FlowEvent = { type: "start", at: T };
const assigned: FlowEvent = { type: "assigned", job: 1, attempt: 1, runner: RUNNER, at: T + 10 };

/** The scope the context's Dispatcher keeps once a wake reached it; undefined while none did. */
function dispatcherReached(contextId: number): Promise<DispatchScope | undefined> {
  return runInDurableObject(w.dispatcherStub(contextId), (_instance, ds) => ds.storage.get<DispatchScope>("scope"));
}

describe("FlowEffects", () => {
  it("wakes the context's dispatcher for a batch that queued work, and only then", async () => {
    const { state, scope, stub } = newFlow();
    const quiet = newFlow(); // a batch that wrote nothing to Redis owes dispatch nothing
    await runInDurableObject(stub, async (_instance, ds) => {
      const effects = effectsOf(ds.storage, scope);
      const batch = batchOf(state, [start]);
      expect(batch.plan?.queued.map((q) => q.key)).toEqual([w.keys.queue(state.contextId, "sh", state.id)]);
      expect(await effects.committed(batch)).toBe(true);
      expect(await dispatcherReached(state.contextId)).toEqual(dispatchScopeOf(scope));
      expect(await ds.storage.get(OWED)).toBeUndefined();

      const journalOnly = batchOf(through(quiet.state, [start]), [assigned]);
      expect(journalOnly.plan).toBeUndefined();
      const other = effectsOf(ds.storage, quiet.scope);
      expect(await other.committed(journalOnly)).toBe(true);
      expect(await dispatcherReached(quiet.state.contextId)).toBeUndefined();
      expect(await ds.storage.get(OWED)).toBeUndefined();
    });
  });

  it("owes again the wake of a pending plan that was run again", async () => {
    const { state, scope, stub } = newFlow();
    await runInDurableObject(stub, async (_instance, ds) => {
      const effects = effectsOf(ds.storage, scope);
      const plan = batchOf(state, [start]).plan;
      if (!plan) throw new Error("the start wrote nothing");
      expect(await effects.resolved(plan)).toBe(true);
      expect(await dispatcherReached(state.contextId)).toEqual(dispatchScopeOf(scope));
    });
  });

  it("keeps a wake that failed as owed, adds later ones to it, and clears it once it went through", async () => {
    const { state, scope, stub } = newFlow();
    await runInDurableObject(stub, async (_instance, ds) => {
      const away = effectsOf(ds.storage, scope, unreachable);
      const batch = batchOf(state, [start]);
      const queues = batch.plan?.queued ?? [];
      expect(queues).toHaveLength(1);
      expect(await away.committed(batch)).toBe(false);
      expect(await ds.storage.get<Wake>(OWED)).toEqual({ queues });

      expect(await away.wake({ freed: [RUNNER], mail: true })).toBe(false);
      expect(await ds.storage.get<Wake>(OWED)).toEqual({ mail: true, freed: [RUNNER], queues });
      expect(await away.wake(undefined)).toBe(false); // the alarm's retry, still away
      expect(await ds.storage.get<Wake>(OWED)).toEqual({ mail: true, freed: [RUNNER], queues });
      expect(await dispatcherReached(state.contextId)).toBeUndefined();

      // The dispatcher is back (a fresh instance reads what is owed from storage).
      const back = effectsOf(ds.storage, scope);
      expect(await back.wake(undefined)).toBe(true);
      expect(await ds.storage.get(OWED)).toBeUndefined();
      expect(await dispatcherReached(state.contextId)).toEqual(dispatchScopeOf(scope));
      expect(await back.wake(undefined)).toBe(true); // nothing owed
    });
  });
});
