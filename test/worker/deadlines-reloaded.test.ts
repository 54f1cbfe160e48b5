import { runInDurableObject } from "cloudflare:test";
import { afterAll, describe, expect, it } from "vitest";
import { storeFor } from "../../functions/core/store.js";
import { Deadlines, type DeadlineHost } from "../../functions/flow/deadlines.js";
import { GroupCommit } from "../../functions/flow/group-commit.js";
import { nearestDeadline, type FlowEvent, type FlowState } from "../../shared/flow/index.js";
import { flowOf, shJob, through } from "./flow-fixtures.js";
import { quietHost } from "./group-commit-fixtures.js";
import { testWorker } from "./harness.js";

// The alarm of a flow whose state is read back from storage (Deadlines.reloaded): the commit
// that gave its deadlines may have armed nothing (the object died between the script call and
// arming it, or a plan left pending was applied when settled), so reading it back arms it. And
// the alarm armed before a commit goes out (Deadlines.ahead), so that one whose object dies
// before arming still rings though nobody reads the flow back. In a real Durable Object's
// storage, the flow in real Redis.

const w = testWorker("deadlines-reloaded");
afterAll(() => w.cleanup());

const store = storeFor(w.env);
const T = Date.now();
const start: FlowEvent = { type: "start", at: T };

/** A new flow in a real context of its own: jobs a and b (b after a), delivery timeout 300 s. */
async function newFlow() {
  const context = await store.contexts.create({ admins: [9], readers: [], executors: [] });
  const state = flowOf(context.id, [shJob(1, "a"), shJob(2, "b", [1])], { timeout: 300 });
  return { state, ...w.flowStub(context.id, 1) };
}

/** Deadlines over `storage` that are never asked to act (only to arm). */
function deadlinesOver(storage: DurableObjectStorage): Deadlines {
  const host: DeadlineHost = {
    storage,
    enqueue: () => Promise.reject(new Error("not asked to act here")),
    isPaused: async () => false,
    expand: async () => undefined,
    whyUndelivered: async () => undefined,
  };
  return new Deadlines(host);
}

describe("Deadlines.reloaded and Deadlines.ahead", () => {
  it("has the alarm ring by the nearest deadline of a state read back: sets none, moves a later one, leaves an earlier one", async () => {
    const { state, stub } = await newFlow();
    const started = through(state, [start]);
    const due = nearestDeadline(started)?.at as number;
    expect(due).toBeGreaterThan(T);
    await runInDurableObject(stub, async (_instance, ds) => {
      try {
        await deadlinesOver(ds.storage).reloaded(started); // no alarm (the object died before arming)
        expect(await ds.storage.getAlarm()).toBe(due);
        await ds.storage.setAlarm(due + 60_000); // one later (a deadline the commit moved nearer)
        await deadlinesOver(ds.storage).reloaded(started);
        expect(await ds.storage.getAlarm()).toBe(due);
        await ds.storage.setAlarm(due - 1_000); // one earlier rings for it anyway: no write
        await deadlinesOver(ds.storage).reloaded(started);
        expect(await ds.storage.getAlarm()).toBe(due - 1_000);
        await ds.storage.deleteAlarm();
        await deadlinesOver(ds.storage).reloaded(state); // not started: no deadline, no alarm
        expect(await ds.storage.getAlarm()).toBeNull();
        // Read back by the alarm's handler: it arms when done, so nothing is written until then.
        const ringing = deadlinesOver(ds.storage);
        ringing.rang();
        await ringing.reloaded(started);
        expect(await ds.storage.getAlarm()).toBeNull();
        ringing.woke();
        await ringing.reloaded(started);
        expect(await ds.storage.getAlarm()).toBe(due);
      } finally {
        await ds.storage.deleteAlarm();
      }
    });
  });

  it("arms a fresh object's alarm when a real GroupCommit reads back a flow whose commit armed nothing", async () => {
    const { state, scope, stub } = await newFlow();
    expect(await store.flows.create(state, [], T)).toBe(true);
    await runInDurableObject(stub, async (_instance, ds) => {
      try {
        // The start is committed (Redis and journal) and no alarm is set after it, as when the
        // object died before its afterCommit.
        const first = new GroupCommit(quietHost(ds.storage, store, scope));
        first.adopt(state);
        await first.enqueue(start);
        expect(await ds.storage.getAlarm()).toBeNull();

        // The object after it: fresh memory, the state read back.
        const deadlines = deadlinesOver(ds.storage);
        const fresh = new GroupCommit(quietHost(ds.storage, store, scope, { reloaded: (s) => deadlines.reloaded(s) }));
        const loaded = (await fresh.load()) as FlowState;
        expect(loaded.status).toBe("started");
        expect(await ds.storage.getAlarm()).toBe(nearestDeadline(loaded)?.at);
      } finally {
        await ds.storage.deleteAlarm();
      }
    });
  });

  it("arms the alarm before a commit goes out (Deadlines.ahead), so a commit whose object died before arming still rings", async () => {
    const { state, scope, stub } = await newFlow();
    expect(await store.flows.create(state, [], T)).toBe(true);
    await runInDurableObject(stub, async (_instance, ds) => {
      const deadlines = deadlinesOver(ds.storage);
      // The object dies after the script call: nothing it owes after the commit is done.
      const host = quietHost(ds.storage, store, scope, {
        committing: (before, after) => deadlines.ahead(after, before),
      });
      try {
        const commits = new GroupCommit(host);
        commits.adopt(state);
        await commits.enqueue(start);
        const started = (await commits.load()) as FlowState;
        expect(await ds.storage.getAlarm()).toBe(nearestDeadline(started)?.at);
        // Nothing nearer: a commit's arming then finds it where it should be.
        await deadlines.arm(started, false);
        expect(await ds.storage.getAlarm()).toBe(nearestDeadline(started)?.at);
      } finally {
        await ds.storage.deleteAlarm();
      }
    });
  });
});
