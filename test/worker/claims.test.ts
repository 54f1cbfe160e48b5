import { env } from "cloudflare:workers";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { Keys, parseWorkItem, workItem } from "../../shared/keys.js";
import { Store, type ClaimRunner, type ReadyQueue } from "../../shared/store/index.js";
import { connectRedis } from "../../shared/store/redis.js";
import { deletePrefix, freshPrefix } from "../support/prefix.js";

// claimWork, the one script that hands out work, against real Redis through the REST endpoint:
// the turn rule (priority bands, equal shares in passes) on one claim, and every limit (runner
// concurrency, a flow's max_parallel, the context's max_inflight) under 40 claims sent at once,
// as many isolates' worth of dispatchers and pull leases would send them.

const prefix = freshPrefix("claims");
const redis = connectRedis({ url: env.UPSTASH_REDIS_REST_URL, token: env.UPSTASH_REDIS_REST_TOKEN });
const store = new Store(redis, new Keys(prefix));
const keys = store.keys;

afterAll(() => deletePrefix(redis, prefix));

let ctx: number;
beforeAll(async () => {
  ctx = (await store.contexts.create({ admins: [1], readers: [], executors: [] })).id;
});

/** A flow's sh queue filled with `n` work items. */
async function queue(flow: number, n: number, extra: Partial<ReadyQueue> = {}): Promise<ReadyQueue> {
  const q: ReadyQueue = { key: keys.queue(ctx, "sh", flow), flow, scriptType: "sh", priority: 0, ...extra };
  const items = Array.from({ length: n }, (_, i) =>
    workItem({ messageKey: keys.message(ctx, 1, flow * 1000 + i), flowId: flow, jobId: i + 1, attempt: 1 }),
  );
  await redis.exec(["DEL", q.key]);
  await redis.exec(["RPUSH", q.key, ...items]);
  return q;
}

function runner(id: number, concurrency: number): ClaimRunner {
  return { id, concurrency, takes: true, serves: (q) => q.scriptType === "sh" };
}

async function clearSlots(...runners: number[]): Promise<void> {
  for (const r of runners) await redis.exec(["DEL", keys.runnerSlots(ctx, r)]);
}

const flowsOf = (items: string[]) => items.map((i) => parseWorkItem(i)?.flowId);

describe("the turn rule", () => {
  it("gives each queue of a band an equal share in passes, and a higher band first", async () => {
    await clearSlots(1);
    const [a, b, c] = [await queue(1, 10), await queue(2, 10), await queue(3, 1)];
    const { claims, drained } = await store.dispatch.claim(ctx, [runner(1, 10)], [a, b, c]);
    // Pass 1: 10 / 3 = 3 each (c has one); pass 2: 3 left over a and b, one each; pass 3: a.
    expect(flowsOf(claims.map((x) => x.item))).toEqual([1, 1, 1, 2, 2, 2, 3, 1, 2, 1]);
    expect(drained.map((q) => q.flow)).toEqual([3]);

    await clearSlots(1);
    const high = await queue(4, 3, { priority: 5 });
    const low = await queue(5, 5);
    const second = await store.dispatch.claim(ctx, [runner(1, 6)], [high, low]);
    expect(flowsOf(second.claims.map((x) => x.item))).toEqual([4, 4, 4, 5, 5, 5]);
    expect(second.drained.map((q) => q.flow)).toEqual([4]);
  });
});

describe("limits under 40 claims at once", () => {
  it("never goes past a runner's concurrency, a flow's max_parallel or the context's max_inflight", async () => {
    await clearSlots(1, 2);
    await store.contextAdmin.setLimits(ctx, { max_inflight: 7 });
    const queues = [
      await queue(11, 10, { maxParallel: 2 }),
      await queue(12, 10),
      await queue(13, 10, { maxParallel: 3 }),
    ];
    const runners = [runner(1, 5), runner(2, 5)];
    const results = await Promise.all(Array.from({ length: 40 }, () => store.dispatch.claim(ctx, runners, queues, 2)));
    const claims = results.flatMap((r) => r.claims);
    const items = claims.map((c) => c.item);
    expect(new Set(items).size).toBe(items.length); // nothing handed out twice
    expect(claims).toHaveLength(7);
    const perFlow = (flow: number) => flowsOf(items).filter((f) => f === flow).length;
    expect(perFlow(11)).toBeLessThanOrEqual(2);
    expect(perFlow(13)).toBeLessThanOrEqual(3);
    for (const r of [1, 2]) expect(claims.filter((c) => c.runner === r).length).toBeLessThanOrEqual(5);
    const held = await Promise.all(
      [1, 2].map((r) => redis.exec<string[]>(["ZRANGE", keys.runnerSlots(ctx, r), 0, -1])),
    );
    expect(held.flat().sort()).toEqual([...items].sort());
    const left = await Promise.all(queues.map((q) => redis.exec<number>(["LLEN", q.key])));
    expect(left.reduce((a, b) => a + Number(b), 0)).toBe(30 - 7);

    // Lifted, the runners fill up to their concurrency, and the flows' caps still hold.
    await store.contextAdmin.setLimits(ctx, { max_inflight: null });
    const more = (
      await Promise.all(Array.from({ length: 40 }, () => store.dispatch.claim(ctx, runners, queues, 2)))
    ).flatMap((r) => r.claims);
    expect(claims.length + more.length).toBe(10);
    const all = flowsOf([...items, ...more.map((c) => c.item)]);
    expect(all.filter((f) => f === 11).length).toBeLessThanOrEqual(2);
    expect(all.filter((f) => f === 13).length).toBeLessThanOrEqual(3);
  });

  it("claims nothing while the context is paused", async () => {
    await clearSlots(1);
    await store.contextAdmin.setPaused(ctx, true);
    const q = await queue(21, 3);
    expect((await store.dispatch.claim(ctx, [runner(1, 5)], [q])).claims).toEqual([]);
    expect(await redis.exec<number>(["LLEN", q.key])).toBe(3);
    await store.contextAdmin.setPaused(ctx, false);
  });
});
