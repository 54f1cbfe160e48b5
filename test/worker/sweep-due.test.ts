import { runInDurableObject } from "cloudflare:test";
import { afterAll, describe, expect, it } from "vitest";
import { storeFor } from "../../functions/core/store.js";
import type { FlowEvent, FlowState, JobState } from "../../shared/flow/index.js";
import { deadlineMember } from "../../shared/keys.js";
import { DELIVERED_SCORE, planCommit, type SweepPolicy } from "../../shared/store/index.js";
import { eventually } from "../support/eventually.js";
import { flowOf, shJob, stepsThrough, through } from "./flow-fixtures.js";
import { testWorker } from "./harness.js";
import { PullRunner } from "./pull-runner.js";

// The supervisor's sweep is the backstop of every flow's own alarm. A commit that starts a
// flow's deadlines (a start, a re-run) makes the flow's context due in the sweep's set itself,
// in the same script call as the start: on real Redis, whatever becomes of the object after.
// The sweep claims due contexts a lease ahead, and each context's sweep ends with a settle that
// sets its next due time from its keys as they are then (the scripts on real Redis; the cron run
// and the Dispatcher inside workerd).

const w = testWorker("sweep-due");
afterAll(() => w.cleanup());

const store = storeFor(w.env);
const T = Date.now();
const RUNNER = 4;

let nextContext = 1;

/** A new flow of one job (id 1), delivery timeout `timeout` s, in a context of its own. */
function newFlow(timeout = 300): FlowState {
  return flowOf(nextContext++, [shJob(1, "a")], { timeout });
}

/** Commits `events` applied to `before` on Redis, as one batch; the state after. */
async function commit(before: FlowState, events: FlowEvent[], at = T): Promise<FlowState> {
  const { state, steps } = stepsThrough(before, events);
  await store.flows.commit(planCommit(store.keys, steps, at));
  return state;
}

/** When the sweep is to look at a context next (epoch ms), or null. */
async function sweepDue(contextId: number): Promise<number | null> {
  const score = await w.redis.exec<string | null>(["ZSCORE", w.keys.sweepDue(), String(contextId)]);
  return score === null ? null : Number(score);
}

const start: FlowEvent = { type: "start", at: T };

describe("a commit that starts a flow's deadlines", () => {
  it("makes its context due in the sweep's set no later than the flow's nearest deadline", async () => {
    const fresh = newFlow();
    const later = newFlow();
    const earlier = newFlow();
    const short = newFlow(30);
    await w.redis.exec(["ZADD", w.keys.sweepDue(), String(T + 1e9), String(later.contextId)]);
    await w.redis.exec(["ZADD", w.keys.sweepDue(), String(T + 1_000), String(earlier.contextId)]);
    for (const state of [fresh, later, earlier, short]) await commit(state, [start]);
    expect(await sweepDue(fresh.contextId)).toBe(T + 300_000);
    expect(await sweepDue(later.contextId)).toBe(T + 300_000); // moved up to the deadline
    expect(await sweepDue(earlier.contextId)).toBe(T + 1_000); // an earlier check stands
    expect(await sweepDue(short.contextId)).toBe(T + 30_000);
  });

  it("does so again for a re-run, and not for other batches", async () => {
    const state = newFlow();
    const running = through(state, [start, { type: "assigned", job: 1, attempt: 1, runner: RUNNER, at: T + 10 }]);
    const failed = await commit(running, [
      { type: "failed", job: 1, attempt: 1, runner: RUNNER, error: "boom", at: T + 20, random: 0.5 },
    ]);
    expect(failed.status).toBe("error");
    expect(await sweepDue(state.contextId)).toBeNull();

    const rerun = await commit(failed, [{ type: "rerun", bases: { 1: 200 }, at: T + 60_000 }], T + 60_000);
    expect(rerun.jobs.get(1)).toMatchObject<Partial<JobState>>({ status: "dispatched", attempt: 2 });
    expect(await sweepDue(state.contextId)).toBe(T + 60_000 + 300_000);
  });
});

const policy: SweepPolicy = {
  raw: null,
  finishedMs: 7 * 86_400_000,
  errorMs: 30 * 86_400_000,
  inboxMs: 30 * 86_400_000,
};
const end = { more: false, poked: 0, failed: 0 };

describe("the sweep's claim of due contexts", () => {
  it("takes a page of due contexts, each pushed a lease ahead: an overlapping claim takes none of them, the next page the rest", async () => {
    const ids = [nextContext++, nextContext++, nextContext++];
    for (const id of ids) await w.redis.exec(["ZADD", w.keys.sweepDue(), String(T - 1_000), String(id)]);
    const later = nextContext++;
    await w.redis.exec(["ZADD", w.keys.sweepDue(), String(T + 60_000), String(later)]);
    const lease = T + 50_000;
    const first = await store.sweep.claim(T, lease, 2);
    expect(first).toHaveLength(2);
    for (const id of first) expect(await sweepDue(id)).toBe(lease);
    // Another run at the same moment: the two are not due to it.
    const rest = await store.sweep.claim(T, lease, 10);
    expect(rest.filter((id) => ids.includes(id))).toEqual(ids.filter((id) => !first.includes(id)));
    expect(await store.sweep.claim(T, lease, 10)).not.toEqual(expect.arrayContaining(ids));
    expect(await sweepDue(later)).toBe(T + 60_000); // not due yet: untouched
    // The lease over (a dispatcher that never settled), they are due again.
    expect(await store.sweep.claim(lease, lease + 50_000, 10)).toEqual(expect.arrayContaining(ids));
  });
});

describe("a context's settle", () => {
  it("sets the next due time from the context's keys as they are then: a flow started during the sweep counts, nothing left takes it out", async () => {
    const state = newFlow();
    const ctx = state.contextId;
    const now = Date.now();
    const look = await store.sweep.look(ctx, now, policy, [], 100);
    expect(look).toMatchObject({ due: [], held: true, waitingMail: 0, figures: 0 });
    // A flow starts between the look and the settle: its deadline is the context's next due time.
    await commit(state, [{ type: "start", at: now }], now);
    expect(await store.sweep.settle(ctx, now, policy, end)).toBe(now + 300_000);
    expect(await sweepDue(ctx)).toBe(now + 300_000);
    // It ends (the deadline entry goes with it): retention is what comes next, 30 days after its end.
    await w.redis.exec(["ZREM", w.keys.deadlines(ctx), deadlineMember({ flowId: state.id })]);
    await w.redis.exec(["ZADD", w.keys.ended(ctx, "error"), String(now), deadlineMember({ flowId: state.id })]);
    expect(await store.sweep.settle(ctx, now, policy, end)).toBe(now + policy.errorMs);
    await w.redis.exec(["ZREM", w.keys.ended(ctx, "error"), deadlineMember({ flowId: state.id })]);
    expect(await store.sweep.settle(ctx, now, policy, end)).toBeUndefined();
    expect(await sweepDue(ctx)).toBeNull();
    expect(Number(await w.redis.exec(["HGET", w.keys.counters(), "settled"]))).toBeGreaterThanOrEqual(3);
  });

  it("keeps a context due at once while its deletion goes on, when it left more, or when its retention changed since the look", async () => {
    const ctx = nextContext++;
    const now = Date.now();
    await w.redis.exec(["ZADD", w.keys.contextsDeleting(), String(now), String(ctx)]);
    expect(await store.sweep.settle(ctx, now, policy, end)).toBe(now + 1_000);
    await w.redis.exec(["ZREM", w.keys.contextsDeleting(), String(ctx)]);
    expect(await store.sweep.settle(ctx, now, policy, { ...end, more: true })).toBe(now + 1_000);
    await w.redis.exec(["HSET", w.keys.context(ctx), "retention", '{"error_seconds":60}']);
    expect((await store.sweep.look(ctx, now, policy, [], 100)).held).toBe(false);
    expect(await store.sweep.settle(ctx, now, policy, end)).toBe(now + 1_000);
    const own = { ...policy, raw: '{"error_seconds":60}', errorMs: 60_000 };
    const look = await store.sweep.look(ctx, now, own, [], 100);
    expect(look).toMatchObject({ held: true, retention: own.raw });
    expect(await store.sweep.settle(ctx, now, own, end)).toBeUndefined();
  });

  it("takes a wake owed away only when no other wake failed since, and keeps the context due for that one", async () => {
    const ctx = nextContext++;
    await w.redis.exec(["HSET", w.keys.context(ctx), "retention", "{}"]);
    const own = { ...policy, raw: "{}" };
    await store.sweep.oweWake(ctx);
    const now = Date.now();
    const look = await store.sweep.look(ctx, now, own, [], 100);
    expect(look.wakeOwed).toBeDefined();
    expect(await sweepDue(ctx)).toBeGreaterThan(now);
    await store.sweep.oweWake(ctx); // another failed meanwhile
    expect(await store.sweep.settle(ctx, now, own, { ...end, wakeOwed: look.wakeOwed as string })).toBe(now + 60_000);
    const again = await store.sweep.look(ctx, now, own, [], 100);
    expect(again.wakeOwed).not.toBe(look.wakeOwed);
    expect(await store.sweep.settle(ctx, now, own, { ...end, wakeOwed: again.wakeOwed as string })).toBeUndefined();
    expect(await w.redis.exec(["HGET", w.keys.context(ctx), "wake_owed"])).toBeNull();
  });

  it("tells the oldest claim not yet delivered in the slot sets it is given", async () => {
    const ctx = nextContext++;
    const now = Date.now();
    await w.redis.exec(["ZADD", w.keys.runnerSlots(ctx, 1), String(DELIVERED_SCORE), "delivered-item"]);
    expect((await store.sweep.look(ctx, now, policy, [1, 2], 100)).oldestClaim).toBeUndefined();
    await w.redis.exec(["ZADD", w.keys.runnerSlots(ctx, 2), String(now - 40_000), "claimed-item"]);
    await w.redis.exec(["ZADD", w.keys.runnerSlots(ctx, 1), String(now - 5_000), "young-item"]);
    expect((await store.sweep.look(ctx, now, policy, [1, 2], 100)).oldestClaim).toBe(now - 40_000);
    expect((await store.sweep.look(ctx, now, policy, [1], 100)).oldestClaim).toBe(now - 5_000);
  });
});

describe("a cron run", () => {
  it("hands every due context to its dispatcher in one run, well past the 50 a run there were", async () => {
    const ids = Array.from({ length: 260 }, () => nextContext++);
    for (const id of ids) await w.redis.exec(["ZADD", w.keys.sweepDue(), "1", String(id)]);
    await w.sweep();
    for (const id of ids) expect(await sweepDue(id), `context ${id}`).toBeNull();
  });

  it("carries out a wake owed: the dispatcher reads its runners again", async () => {
    const admin = await w.newActor();
    const ctx = (await admin.client.createContext()).id;
    const runner = await PullRunner.register(w, admin.client, ctx);
    const kept = () =>
      runInDurableObject(w.dispatcherStub(ctx), (_instance, state) =>
        state.storage.get<{ at: number; list: { id: number; concurrency: number }[] }>("runners"),
      );
    await w.sweep(); // nothing due: the list the registration loaded stays
    const loaded = await eventually(kept, 5_000, 20, "the runner list");
    expect(loaded.list.map((r) => r.id)).toEqual([runner.id]);
    // The runner changes and the wake that should tell the dispatcher fails: the sweep owes it.
    await w.redis.exec(["HSET", w.keys.runner(ctx, runner.id), "concurrency", "7"]);
    await store.sweep.oweWake(ctx);
    await w.redis.exec(["ZADD", w.keys.sweepDue(), "1", String(ctx)]);
    await w.sweep();
    const reloaded = await eventually(kept, 5_000, 20, "the runner list read again");
    expect(reloaded.list.map((r) => r.concurrency)).toEqual([7]);
    expect(await w.redis.exec(["HGET", w.keys.context(ctx), "wake_owed"])).toBeNull();
  });
});
