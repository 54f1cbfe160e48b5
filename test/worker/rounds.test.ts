import { runInDurableObject } from "cloudflare:test";
import { afterAll, describe, expect, it } from "vitest";
import { storeFor } from "../../functions/core/store.js";
import { RunnerBackoff } from "../../functions/dispatch/backoff.js";
import { SETTLE_DELIVERED_AFTER_MS } from "../../functions/dispatch/delivered.js";
import { ReadyRing } from "../../functions/dispatch/ring.js";
import { DispatchRounds } from "../../functions/dispatch/rounds.js";
import type { RoundsHost } from "../../functions/dispatch/rounds-host.js";
import { workItem } from "../../shared/keys.js";
import type { Runner } from "../../shared/model/index.js";
import type { ReadyQueue } from "../../shared/store/index.js";
import { pushRunner } from "./flow-fixtures.js";
import { testWorker } from "./harness.js";

// The Dispatcher's rounds on their own, in a real Durable Object's storage against real Redis,
// with an owner that cannot be asked (its flow's commit timed out while storage was paused). The
// claim stays unsettled, as designed, and the rounds must come back for it by themselves: once
// nothing else wakes the dispatcher, its alarm is what brings the reaper. (Found as a flow stuck
// for the 5 minutes of its delivery deadline in faults-outcomes.test.ts.)

const w = testWorker("rounds");
afterAll(() => w.cleanup());

const store = storeFor(w.env);
const REAP_AFTER_MS = 30_000;

/**
 * Rounds over `storage` whose owners all fail to answer (or, with `delivers`, answer that they
 * delivered); `rested` records what the alarm is told.
 */
function roundsFor(storage: DurableObjectStorage, contextId: number, runner: Runner, delivers = false) {
  const rests: { retrySoon: boolean; reapAt: number | undefined }[] = [];
  let asked = 0;
  const host: RoundsHost = {
    backoff: new RunnerBackoff(storage, { store: () => store, contextId: () => contextId }),
    ring: new ReadyRing(storage, { markWaiting: (value) => store.dispatch.markWaiting(contextId, value) }),
    store: () => store,
    contextId: () => contextId,
    runners: async () => [runner],
    // No mail waits in this test: the relay looks at msg_out and never signs anything.
    signingKey: async () => ({}) as Awaited<ReturnType<RoundsHost["signingKey"]>>,
    askOwners: async (items) => {
      asked += items.length;
      return items.map(() =>
        delivers
          ? { outcome: "delivered" as const }
          : new Error("storage is unreachable: the operation was aborted due to timeout"),
      );
    },
    rested: async (retrySoon, reapAt) => {
      rests.push({ retrySoon, reapAt });
    },
  };
  return { rounds: new DispatchRounds(host), host, rests, asked: () => asked };
}

/** A context with one push runner of sh jobs, and one work item queued in flow `flowId`'s queue. */
async function oneQueuedItem(flowId: number) {
  const context = await store.contexts.create({ admins: [1], readers: [], executors: [] });
  const ctx = context.id;
  const runner = await store.runners.create(pushRunner(ctx));
  const queue: ReadyQueue = { key: w.keys.queue(ctx, "sh", flowId), flow: flowId, scriptType: "sh", priority: 0 };
  const item = workItem({ messageKey: w.keys.message(ctx, 1, flowId * 10), flowId, jobId: 1, attempt: 1 });
  await w.redis.exec(["RPUSH", queue.key, item]);
  return { ctx, runner, queue, item };
}

describe("a claim whose owner could not be asked", () => {
  it("has the alarm come back when the claim may be reaped, also after the object lost its memory", async () => {
    const { ctx, runner, queue, item } = await oneQueuedItem(7);

    await runInDurableObject(w.dispatcherStub(ctx), async (_instance, ds) => {
      const first = roundsFor(ds.storage, ctx, runner);
      await first.host.ring.add([queue]);
      const before = Date.now();
      first.rounds.want({ work: true });
      await first.rounds.run();
      expect(first.asked()).toBe(1);
      // The claim holds its slot, unsettled: the alarm is told to come back when it is reapable.
      const slots = await w.redis.exec<string[]>(["ZRANGE", w.keys.runnerSlots(ctx, runner.id), 0, -1]);
      expect(slots).toEqual([item]);
      const rest = first.rests.at(-1);
      expect(rest?.reapAt).toBeGreaterThanOrEqual(before + REAP_AFTER_MS);
      expect(rest?.reapAt).toBeLessThanOrEqual(Date.now() + REAP_AFTER_MS);

      // A fresh object (memory gone) whose alarm rang early finds the claim too young to reap,
      // and still sets the alarm for it, from what Redis holds.
      const fresh = roundsFor(ds.storage, ctx, runner);
      await fresh.rounds.run();
      expect(fresh.asked()).toBe(0);
      // It reckons from the claim's time in Redis, which is a little before the failed call ended.
      const claimedAt = Number(await w.redis.exec<string>(["ZSCORE", w.keys.runnerSlots(ctx, runner.id), item]));
      expect(fresh.rests.at(-1)?.reapAt).toBe(claimedAt + REAP_AFTER_MS);
      expect(fresh.rests.at(-1)?.reapAt).toBeLessThanOrEqual(rest?.reapAt ?? 0);

      // Once old enough, the reaper asks the owner again.
      await w.redis.exec(["ZADD", w.keys.runnerSlots(ctx, runner.id), "XX", String(before - REAP_AFTER_MS - 1), item]);
      const later = roundsFor(ds.storage, ctx, runner);
      await later.rounds.run();
      expect(later.asked()).toBe(1);
    });
  });
});

describe("a claim delivered", () => {
  it("is not marked in Redis while its attempt may end soon, and needs no mark once its slot is freed", async () => {
    const { ctx, runner, queue, item } = await oneQueuedItem(8);
    const slots = w.keys.runnerSlots(ctx, runner.id);

    await runInDurableObject(w.dispatcherStub(ctx), async (_instance, ds) => {
      const r = roundsFor(ds.storage, ctx, runner, true);
      await r.host.ring.add([queue]);
      const before = Date.now();
      r.rounds.want({ work: true });
      await r.rounds.run();
      expect(r.asked()).toBe(1);
      // Claimed and delivered, its slot still reads the claim time: no mark was written.
      const claimedAt = Number(await w.redis.exec<string>(["ZSCORE", slots, item]));
      expect(claimedAt).toBeGreaterThanOrEqual(before);
      // The alarm comes back to mark it, should the attempt still run then.
      expect(r.rests.at(-1)?.reapAt).toBeGreaterThanOrEqual(before + SETTLE_DELIVERED_AFTER_MS);
      // Even once it looks abandoned, the reaper does not ask its owner again: it was delivered.
      await w.redis.exec(["ZADD", slots, "XX", String(before - 60_000), item]);
      await r.rounds.run();
      expect(r.asked()).toBe(1);

      // The commit that ends the attempt frees the slot and names the item: no mark is owed.
      await w.redis.exec(["ZREM", slots, item]);
      r.rounds.accept({ freed: [runner.id], released: [item] }, false);
      await r.rounds.run();
      expect(r.rests.at(-1)?.reapAt).toBeUndefined();
      expect(await w.redis.exec<number>(["ZCARD", slots])).toBe(0);
    });
  });
});
