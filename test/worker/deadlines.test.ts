import { runInDurableObject } from "cloudflare:test";
import { afterAll, describe, expect, it } from "vitest";
import type { FlowScope } from "../../functions/core/scopes.js";
import { storeFor } from "../../functions/core/store.js";
import { Deadlines, RETRY_SOON_MS, type DeadlineHost } from "../../functions/flow/deadlines.js";
import { GroupCommit } from "../../functions/flow/group-commit.js";
import { rebuildFlow } from "../../functions/flow/stored.js";
import { apply, nearestDeadline, type FlowEvent, type FlowState, type Transition } from "../../shared/flow/index.js";
import type { Store } from "../../shared/store/index.js";
import { flowOf, shJob, through, unreachableStore } from "./flow-fixtures.js";
import { testWorker } from "./harness.js";

// Deadlines on its own: the alarm and the "storage down since" mark in a real Durable Object's
// storage, the pause read from real Redis. Events it raises go to a host that applies them to the
// state machine and records them (and, in the last test, to a real GroupCommit).

const w = testWorker("deadlines");
afterAll(() => w.cleanup());

const store = storeFor(w.env);
/** A Store whose endpoint nothing listens at: reads through it fail as when storage is away. */
const away = unreachableStore(w.keys);

const T = Date.now();
const RUNNER = 4;
const DOWN_SINCE = "storage-down-since";
const UP_AT = "storage-up-at";

/** A new flow in a real context of its own: jobs a and b (b after a), delivery timeout `timeout` s. */
async function newFlow(
  timeout = 300,
): Promise<{ state: FlowState; scope: FlowScope; stub: ReturnType<typeof w.flowStub>["stub"] }> {
  const context = await store.contexts.create({ admins: [9], readers: [], executors: [] });
  const state = flowOf(context.id, [shJob(1, "a"), shJob(2, "b", [1])], { timeout });
  return { state, ...w.flowStub(context.id, 1) };
}

const start: FlowEvent = { type: "start", at: T };

/**
 * A host over `storage` that applies what it is given to `machine.state` and records it; the
 * pause is read through `use.store` (a test swaps it to take storage away and back).
 */
function hostFor(
  storage: DurableObjectStorage,
  machine: { state: FlowState },
  use: { store: Store },
): { host: DeadlineHost; events: FlowEvent[]; asked: number[] } {
  const events: FlowEvent[] = [];
  const asked: number[] = [];
  const host: DeadlineHost = {
    storage,
    enqueue: async (event): Promise<Transition> => {
      events.push(event);
      const t = apply(machine.state, event);
      machine.state = t.state;
      return t;
    },
    isPaused: () => use.store.contextAdmin.isPaused(machine.state.contextId),
    expand: async () => undefined,
    whyUndelivered: async (_state, jobId) => {
      asked.push(jobId);
      return "waiting for a pull runner of script type sh to lease it";
    },
  };
  return { host, events, asked };
}

type Hosted = ReturnType<typeof hostFor>;

/** Runs `work` in a new flow's object once the flow started, with a host over its storage (hostFor). */
async function inStartedFlow(
  work: (flow: { started: FlowState; machine: { state: FlowState }; ds: DurableObjectState } & Hosted) => Promise<void>,
): Promise<void> {
  const { state, stub } = await newFlow();
  const started = through(state, [start]);
  await runInDurableObject(stub, async (_instance, ds) => {
    const machine = { state: started };
    await work({ started, machine, ds, ...hostFor(ds.storage, machine, { store }) });
  });
}

describe("Deadlines", () => {
  it("sets the alarm at the nearest deadline, or soon when asked to try again", async () => {
    const { state, stub } = await newFlow();
    // a's attempt delivered (not acknowledged) at T + 1 s: its ack deadline, T + 61 s, is the nearest.
    const started = through(state, [
      start,
      { type: "assigned", job: 1, attempt: 1, runner: RUNNER, at: T + 1_000 },
      { type: "delivered", job: 1, attempt: 1, runner: RUNNER, acknowledged: false, at: T + 1_000 },
    ]);
    expect(started.jobs.get(1)?.deadline).toMatchObject({ kind: "ack", at: T + 61_000 });
    await runInDurableObject(stub, async (_instance, ds) => {
      const deadlines = new Deadlines(hostFor(ds.storage, { state: started }, { store }).host);
      try {
        await deadlines.arm(started, false, T);
        expect(await ds.storage.getAlarm()).toBe(T + 61_000);
        await deadlines.arm(started, true, T);
        expect(await ds.storage.getAlarm()).toBe(T + RETRY_SOON_MS);
        await deadlines.arm(started, true, T + 60_000); // the deadline comes before "soon"
        expect(await ds.storage.getAlarm()).toBe(T + 61_000);
        await deadlines.arm(undefined, true, T); // no state (memory forgotten), something to retry
        expect(await ds.storage.getAlarm()).toBe(T + RETRY_SOON_MS);
        await deadlines.arm(state, false, T); // not started: no deadline, nothing to retry
        expect(await ds.storage.getAlarm()).toBeNull();
        await deadlines.arm(started, false, T);
        await deadlines.arm(null, false, T); // no such flow
        expect(await ds.storage.getAlarm()).toBeNull();
      } finally {
        await ds.storage.deleteAlarm();
      }
    });
  });

  it("holds the alarm within reach of work claimed and not delivered, and lets it go back once delivered", async () => {
    const { state, stub } = await newFlow();
    const started = through(state, [start]);
    const due = nearestDeadline(started)?.at ?? 0;
    const by = T + 30_000;
    await runInDurableObject(stub, async (_instance, ds) => {
      const deadlines = new Deadlines(hostFor(ds.storage, { state: started }, { store }).host);
      try {
        await deadlines.arm(started, false, T);
        expect(await ds.storage.getAlarm()).toBe(due);
        await deadlines.armBy(by); // a commit claims: should the object die, the alarm comes by then
        expect(await ds.storage.getAlarm()).toBe(by);
        await deadlines.arm(started, false, T, undefined, by); // a commit while the claim is delivered
        expect(await ds.storage.getAlarm()).toBe(by);
        await deadlines.claimsDelivered(started); // delivered: back to the deadline
        expect(await ds.storage.getAlarm()).toBe(due);
        await deadlines.armBy(by);
        await deadlines.arm(started, true, T, undefined, by); // something to retry soon comes first
        expect(await ds.storage.getAlarm()).toBe(T + RETRY_SOON_MS);
        await deadlines.claimsDelivered(started); // not the claims' alarm any more: left as it is
        expect(await ds.storage.getAlarm()).toBe(T + RETRY_SOON_MS);
        const ended = through(started, [{ type: "cancel", reason: "enough", at: T }]);
        await deadlines.arm(started, false, T);
        await deadlines.armBy(by);
        expect(await ds.storage.getAlarm()).toBe(by);
        await deadlines.claimsDelivered(ended); // the flow ended meanwhile: no alarm at all
        expect(await ds.storage.getAlarm()).toBeNull();
      } finally {
        await ds.storage.deleteAlarm();
      }
    });
  });

  it("follows each batch's changes to the nearest deadline, and leaves an alarm already in place alone", async () => {
    const { state, stub } = await newFlow();
    const at = (job: number, ms: number) => ({ job, attempt: 1, runner: RUNNER, at: T + ms });
    const batches: FlowEvent[][] = [
      [start],
      [
        { type: "assigned", ...at(1, 1_000) },
        { type: "delivered", ...at(1, 1_000), acknowledged: false },
      ],
      [{ type: "started", ...at(1, 3_000) }], // the nearest job's deadline moves later
      [{ type: "finished", ...at(1, 4_000), result: {} }], // …and goes; b is dispatched
      [{ type: "assigned", ...at(2, 5_000) }],
      [{ type: "cancel", reason: "enough", at: T + 6_000 }], // no deadline left
    ];
    await runInDurableObject(stub, async (_instance, ds) => {
      let sets = 0;
      const storage = new Proxy(ds.storage, {
        get(target, name) {
          if (name === "setAlarm") return (time: number) => (sets++, target.setAlarm(time));
          const value = Reflect.get(target, name) as unknown;
          return typeof value === "function" ? (value as (...a: unknown[]) => unknown).bind(target) : value;
        },
      });
      const deadlines = new Deadlines(hostFor(storage, { state }, { store }).host);
      try {
        let before = state;
        for (const batch of batches) {
          const after = through(before, batch);
          await deadlines.arm(after, false, T, before);
          expect(await ds.storage.getAlarm()).toBe(nearestDeadline(after)?.at ?? null);
          before = after;
        }
        const count = sets;
        await deadlines.arm(before, false, T, before); // nothing changed: no write
        const again = { ...before }; // the same flow, read back: a state not reached from the last one
        await deadlines.arm(again, false, T); // a state not reached from the last one: read whole
        expect(sets).toBe(count);
      } finally {
        await ds.storage.deleteAlarm();
      }
    });
  });

  it("moves the deadlines later by the time storage was away, once it is back", async () => {
    await inStartedFlow(async ({ started, machine, host, events, ds }) => {
      const deadlines = new Deadlines(host);
      expect(await deadlines.storageUp(started, T + 500)).toBe(0); // storage was never away
      expect(events).toEqual([]);

      await deadlines.storageDown(T + 1_000);
      await deadlines.storageDown(T + 3_000); // still the same outage: it started at the first
      expect(await ds.storage.get(DOWN_SINCE)).toBe(T + 1_000);
      // Back, but memory was forgotten: nothing to move yet; the outage is kept for later, and
      // when it ended (the call that came back, however late the move comes).
      expect(await deadlines.storageUp(undefined, T + 5_000)).toBe(0);
      expect(await deadlines.storageUp(undefined, T + 6_000)).toBe(0); // not its first return
      expect(await ds.storage.get(DOWN_SINCE)).toBe(T + 1_000);
      expect(await ds.storage.get(UP_AT)).toBe(T + 5_000);

      // The object was evicted meanwhile: a fresh instance reads when storage went away and came
      // back, and moves the deadlines by those 4 s, not by the 39 s to the time it is woken.
      const fresh = new Deadlines(host);
      expect(await fresh.storageUp(started, T + 40_000)).toBe(4_000);
      expect(events).toEqual([{ type: "resumed", downFor: 4_000, at: T + 40_000, until: T + 5_000 }]);
      expect(machine.state.jobs.get(1)?.deadline).toMatchObject({ kind: "delivery", at: T + 300_000 + 4_000 });
      expect(await ds.storage.get(DOWN_SINCE)).toBeUndefined();
      expect(await ds.storage.get(UP_AT)).toBeUndefined();
      expect(await fresh.storageUp(machine.state, T + 9_000)).toBe(0); // told once
      expect(events).toHaveLength(1);
    });
  });

  it("charges an outage that came back with memory forgotten up to that return, unless storage went away again", async () => {
    await inStartedFlow(async ({ started, machine, host, events, ds }) => {
      const deadlines = new Deadlines(host);
      await deadlines.storageDown(T);
      expect(await deadlines.storageUp(undefined, T + 3_000)).toBe(0);
      // The same object moves the deadlines at its next commit, 30 s on: by the 3 s of the outage.
      expect(await deadlines.storageUp(started, T + 33_000)).toBe(3_000);
      expect(events).toEqual([{ type: "resumed", downFor: 3_000, at: T + 33_000, until: T + 3_000 }]);
      expect(await ds.storage.get(UP_AT)).toBeUndefined();

      // Back, then away again before the move: one outage, from the first start to the last return.
      await deadlines.storageDown(T + 40_000);
      expect(await deadlines.storageUp(undefined, T + 42_000)).toBe(0);
      await deadlines.storageDown(T + 45_000);
      expect(await ds.storage.get(UP_AT)).toBeUndefined();
      expect(await deadlines.storageUp(undefined, T + 50_000)).toBe(0);
      expect(await new Deadlines(host).storageUp(machine.state, T + 70_000)).toBe(10_000);
      expect(events.slice(1)).toEqual([{ type: "resumed", downFor: 10_000, at: T + 70_000, until: T + 50_000 }]);
      expect(await ds.storage.get(DOWN_SINCE)).toBeUndefined();
      expect(await ds.storage.get(UP_AT)).toBeUndefined();
    });
  });

  it("moves the deadlines once when two calls come back at the same time", async () => {
    await inStartedFlow(async ({ started, host, events, ds }) => {
      await new Deadlines(host).storageDown(T);
      // A fresh instance (the mark is only in storage) and two successful calls at once.
      const fresh = new Deadlines(host);
      const moved = await Promise.all([fresh.storageUp(started, T + 1_000), fresh.storageUp(started, T + 1_000)]);
      expect(moved.sort()).toEqual([0, 1_000]);
      expect(events).toEqual([{ type: "resumed", downFor: 1_000, at: T + 1_000, until: T + 1_000 }]);
      // Two outages reported at once on a fresh instance: the first start stands.
      const other = new Deadlines(host);
      await Promise.all([other.storageDown(T + 2_000), other.storageDown(T + 2_500)]);
      expect(await ds.storage.get(DOWN_SINCE)).toBe(T + 2_000);
      await ds.storage.delete(DOWN_SINCE);
    });
  });

  it("keeps the outage when moving the deadlines fails, and moves them on the next call that comes back", async () => {
    await inStartedFlow(async ({ started, host, events, ds }) => {
      let failing = true;
      const flaky: DeadlineHost = {
        ...host,
        enqueue: (event) => (failing ? Promise.reject(new Error("storage timed out")) : host.enqueue(event)),
      };
      const deadlines = new Deadlines(flaky);
      await deadlines.storageDown(T);
      await expect(deadlines.storageUp(started, T + 9_000)).rejects.toThrow("storage timed out");
      expect(await ds.storage.get(DOWN_SINCE)).toBe(T); // not forgotten
      // The failed call was itself an outage beginning later: the earlier start stands.
      await deadlines.storageDown(T + 9_000);
      expect(await ds.storage.get(DOWN_SINCE)).toBe(T);
      failing = false;
      expect(await deadlines.storageUp(started, T + 12_000)).toBe(12_000);
      expect(events).toEqual([{ type: "resumed", downFor: 12_000, at: T + 12_000, until: T + 12_000 }]);
      expect(await ds.storage.get(DOWN_SINCE)).toBeUndefined();
    });
  });

  it("does not act on a due deadline while storage is away, and moves it once storage is back", async () => {
    const { state, stub } = await newFlow(3);
    const started = through(state, [start]); // a's delivery deadline: T + 3 s
    await runInDurableObject(stub, async (_instance, ds) => {
      const machine = { state: started };
      const use = { store: away };
      const { host, events, asked } = hostFor(ds.storage, machine, use);
      const deadlines = new Deadlines(host);

      expect(await deadlines.actOnDue(started, T + 10_000)).toBe(false);
      expect(events).toEqual([]);
      expect(asked).toEqual([]);
      expect(await ds.storage.get(DOWN_SINCE)).toBe(T + 10_000); // storage marked down

      // Back at T + 25 s: the outage (15 s) moves the deadline first; nothing is failed on this call.
      use.store = store;
      expect(await deadlines.actOnDue(started, T + 25_000)).toBe(true);
      expect(events).toEqual([{ type: "resumed", downFor: 15_000, at: T + 25_000, until: T + 25_000 }]);
      expect(machine.state.jobs.get(1)?.deadline).toMatchObject({ kind: "delivery", at: T + 18_000 });
      expect(await ds.storage.get(DOWN_SINCE)).toBeUndefined();

      // Not due before then; due after.
      expect(await deadlines.actOnDue(machine.state, T + 17_999)).toBe(true);
      expect(events).toHaveLength(1);
      expect(await deadlines.actOnDue(machine.state, T + 18_000)).toBe(true);
      expect(events.slice(1)).toEqual([
        {
          type: "deadline",
          job: 1,
          attempt: 1,
          kind: "delivery",
          at: T + 18_000,
          random: expect.any(Number),
          why: "waiting for a pull runner of script type sh to lease it",
        },
      ]);
      expect(machine.state.jobs.get(1)).toMatchObject({ status: "error" });
    });
  });

  it("turns each due deadline into its event: a missed delivery fails, a paused context postpones it", async () => {
    const { state, stub } = await newFlow(3);
    const started = through(state, [start]);
    await runInDurableObject(stub, async (_instance, ds) => {
      const machine = { state: started };
      const { host, events, asked } = hostFor(ds.storage, machine, { store });
      const deadlines = new Deadlines(host);
      expect(await deadlines.actOnDue(started, T + 2_999)).toBe(true); // nothing due yet
      expect(events).toEqual([]);

      await store.contextAdmin.setPaused(state.contextId, true);
      expect(await deadlines.actOnDue(started, T + 4_000)).toBe(true);
      expect(events).toEqual([
        { type: "postponed", job: 1, attempt: 1, kind: "delivery", until: T + 4_000 + 3_000, at: T + 4_000 },
      ]);
      expect(asked).toEqual([1]);
      expect(machine.state.jobs.get(1)?.deadline?.at).toBe(T + 7_000);

      await store.contextAdmin.setPaused(state.contextId, false);
      expect(await deadlines.actOnDue(machine.state, T + 7_000)).toBe(true);
      expect(events[1]).toMatchObject({ type: "deadline", job: 1, attempt: 1, kind: "delivery", at: T + 7_000 });
      expect(machine.state.status).toBe("error");
      expect(machine.state.jobs.get(1)?.error).toBe(
        "attempt 1 was not delivered to a runner within 3 s: waiting for a pull runner of script type sh to lease it",
      );
    });
  });

  it("fails a job in Redis through a real GroupCommit when its delivery deadline passed", async () => {
    const { state, scope, stub } = await newFlow(3);
    expect(await store.flows.create(state, [], T)).toBe(true);
    await runInDurableObject(stub, async (_instance, ds) => {
      const commits: GroupCommit = new GroupCommit({
        storage: ds.storage,
        store: () => store,
        rebuild: (journal) => rebuildFlow(store, scope, journal),
        publish: () => undefined,
        reloaded: () => undefined,
        afterCommit: async () => undefined,
        afterSettle: async () => undefined,
        storageDown: async () => undefined,
        storageUp: () => undefined,
      });
      const deadlines = new Deadlines({
        storage: ds.storage,
        enqueue: (event) => commits.enqueue(event),
        isPaused: () => store.contextAdmin.isPaused(state.contextId),
        expand: async () => undefined,
        whyUndelivered: async () => "no runner took it",
      });
      commits.adopt(state);
      await commits.enqueue(start);
      try {
        await deadlines.arm(commits.current, false, T);
        expect(await ds.storage.getAlarm()).toBe(T + 3_000);

        expect(await deadlines.actOnDue(commits.current as FlowState, T + 5_000)).toBe(true);
        const ended = commits.current as FlowState;
        expect(ended.status).toBe("error");
        const ctx = state.contextId;
        expect(await w.redis.exec(["HGET", w.keys.job(ctx, 9, 1), "status"])).toBe("error");
        expect(await w.redis.exec(["HGET", w.keys.job(ctx, 9, 1), "error"])).toBe(
          "attempt 1 was not delivered to a runner within 3 s: no runner took it",
        );
        expect(await w.redis.exec(["HGET", w.keys.flow(ctx, 1), "status"])).toBe("error");
        // The attempt's message takes its end from the job (messageEnd): the commit wrote the job alone.
        expect(await w.redis.exec(["HGET", w.keys.message(ctx, 9, 100), "status"])).toBe("dispatched");
        expect(await w.redis.exec(["HGET", w.keys.job(ctx, 9, 1), "ended_at"])).toMatch(/^\d+$/);

        await deadlines.arm(ended, false, T + 5_000); // an ended flow has no deadline left
        expect(await ds.storage.getAlarm()).toBeNull();
      } finally {
        await ds.storage.deleteAlarm();
      }
    });
  });
});
