import { env } from "cloudflare:workers";
import { afterAll, beforeEach, describe, expect, it } from "vitest";
import { generateKeyPair } from "../../shared/auth/index.js";
import { Keys, workItem } from "../../shared/keys.js";
import type { Runner } from "../../shared/model/index.js";
import {
  planCommit,
  Store,
  WAITING_NONE,
  WAITING_SEVERAL,
  type CommitClaim,
  type CommitPlan,
  type ReadyQueue,
} from "../../shared/store/index.js";
import { connectRedis } from "../../shared/store/redis.js";
import { deletePrefix, freshPrefix } from "../support/prefix.js";
import { flowOf, pushRunner, shJob, stepsThrough } from "./flow-fixtures.js";

// A commit that claims its own flow's work in its script call (commitFlow's and createFlow's
// "C"), against real Redis through the REST endpoint: it gives queued attempts to a push runner
// with room exactly when a dispatcher's claim could, and otherwise leaves them queued.

const prefix = freshPrefix("commit-claims");
const redis = connectRedis({ url: env.UPSTASH_REDIS_REST_URL, token: env.UPSTASH_REDIS_REST_TOKEN });
const store = new Store(redis, new Keys(prefix));
const keys = store.keys;
afterAll(() => deletePrefix(redis, prefix));

const FLOW = 5;
let ctx: number;

/** A push runner of sh jobs (a key of its own: one key, one runner), taking 3 deliveries a POST. */
async function runner(fields: Partial<Runner> = {}): Promise<Runner> {
  return store.runners.create(
    pushRunner(ctx, { pubkey: (await generateKeyPair()).x, deliveries_per_post: 3, ...fields }),
  );
}

const queue = (flow = FLOW): ReadyQueue => ({ key: keys.queue(ctx, "sh", flow), flow, scriptType: "sh", priority: 0 });
const item = (job: number, avoid?: number) =>
  workItem({ messageKey: keys.message(ctx, 9, 100 + job), flowId: FLOW, jobId: job, attempt: 1 }, avoid);

/** A commit that puts `items` in the flow's queue (an RPUSH section, as a dispatch writes it). */
function pushing(items: string[]): Pick<CommitPlan, "keys" | "args"> {
  return { keys: [queue().key], args: ["0", "1", "P", "1", String(items.length), ...items] };
}

const claim = (claims: CommitClaim[]) => ({ contextId: ctx, flowId: FLOW, claims, now: 1234 });
const slots = (id: number) => redis.exec<string[]>(["ZRANGE", keys.runnerSlots(ctx, id), "0", "-1", "WITHSCORES"]);
const queued = () => redis.exec<string[]>(["LRANGE", queue().key, "0", "-1"]);

beforeEach(async () => {
  ctx = (await store.contexts.create({ admins: [1], readers: [], executors: [] })).id;
  await store.dispatch.markWaiting(ctx, WAITING_NONE);
});

describe("a commit's claims", () => {
  it("give a push runner with room what the commit queued, up to its free slots, and say where it goes", async () => {
    const r = await runner();
    const done = await store.flows.commit(
      pushing([item(1), item(2), item(3)]),
      claim([{ queue: queue(), candidates: [r.id] }]),
    );
    expect(done.skipped).toEqual([]);
    expect(done.waiting).toBe(WAITING_NONE);
    expect(done.claimed).toEqual([
      {
        queue: queue(),
        runner: { id: r.id, address: r.address, perPost: 3, pubkey: r.pubkey },
        items: [item(1), item(2)],
        drained: false,
        full: true,
      },
    ]);
    expect(await slots(r.id)).toEqual([item(1), "1234", item(2), "1234"]);
    expect(await queued()).toEqual([item(3)]);
  });

  it("tries the next candidate when one is full, and says when the queue ran empty", async () => {
    const [full, roomy] = [await runner({ concurrency: 1 }), await runner({ concurrency: 5 })];
    await redis.exec(["ZADD", keys.runnerSlots(ctx, full.id), "1", "other"]);
    const done = await store.flows.commit(
      pushing([item(1), item(2)]),
      claim([{ queue: queue(), candidates: [full.id, roomy.id] }]),
    );
    expect(done.claimed.map((c) => [c.runner.id, c.items, c.drained, c.full])).toEqual([
      [roomy.id, [item(1), item(2)], true, false],
    ]);
    expect(await queued()).toEqual([]);
  });

  it("claim nothing unless no other flow waits in the dispatcher's ring (or it is not known), nor while paused or capped", async () => {
    const r = await runner({ concurrency: 10 });
    const tryOnce = async () => {
      const done = await store.flows.commit(pushing([item(1)]), claim([{ queue: queue(), candidates: [r.id] }]));
      await redis.exec(["DEL", queue().key, keys.runnerSlots(ctx, r.id)]);
      return done.claimed.length;
    };
    for (const waiting of ["7", WAITING_SEVERAL]) {
      await store.dispatch.markWaiting(ctx, waiting);
      expect(await tryOnce(), waiting).toBe(0);
    }
    await redis.exec(["HDEL", keys.context(ctx), "dispatch_waiting"]);
    expect(await tryOnce(), "not known").toBe(0);
    // This flow's own queue in the ring: its commits may take its work (nobody else waits).
    await store.dispatch.markWaiting(ctx, String(FLOW));
    expect(await tryOnce(), "its own").toBe(1);
    await store.contextAdmin.setPaused(ctx, true);
    expect(await tryOnce(), "paused").toBe(0);
    await store.contextAdmin.setPaused(ctx, false);
    await store.contextAdmin.setLimits(ctx, { max_inflight: 50 });
    expect(await tryOnce(), "max_inflight").toBe(0);
    await store.contextAdmin.setLimits(ctx, { max_inflight: null });
    expect(await tryOnce(), "free again").toBe(1);
  });

  it("skip and name candidates that are gone, pull, or do not take the script type", async () => {
    const pull = await runner({ address: "", local: true });
    const python = await runner({ script_types: ["python"] });
    const done = await store.flows.commit(
      pushing([item(1)]),
      claim([{ queue: queue(), candidates: [999, pull.id, python.id] }]),
    );
    expect(done.claimed).toEqual([]);
    expect(done.invalid).toEqual([999, pull.id, python.id]);
    expect(await queued()).toEqual([item(1)]);
  });

  it("give a retry to another candidate than the runner it avoids, and to that one only when no other has room", async () => {
    const [avoided, other] = [await runner({ concurrency: 5 }), await runner({ concurrency: 1 })];
    const done = await store.flows.commit(
      pushing([item(1, avoided.id), item(2, avoided.id)]),
      claim([{ queue: queue(), candidates: [avoided.id, other.id] }]),
    );
    // The dispatcher's own rule (claimFromQueues): the first goes to the other runner, the second,
    // with no room left elsewhere, back to the runner it avoids.
    expect(done.claimed.map((c) => [c.runner.id, c.items])).toEqual([
      [avoided.id, [item(2)]],
      [other.id, [item(1)]],
    ]);
    expect(await queued()).toEqual([]);
  });

  it("take a job pinned to a runner whatever script types the runner lists", async () => {
    const r = await runner({ script_types: ["python"] });
    const pinned: ReadyQueue = { key: keys.pinnedQueue(ctx, r.id, FLOW), flow: FLOW, runner: r.id, priority: 0 };
    const done = await store.flows.commit(
      { keys: [pinned.key], args: ["0", "1", "P", "1", "1", item(1)] },
      claim([{ queue: pinned, candidates: [r.id] }]),
    );
    expect(done.claimed.map((c) => c.items)).toEqual([[item(1)]]);
  });

  it("run with a creation and its start in one call (createFlow), and never when the call is run again", async () => {
    const r = await runner({ concurrency: 10 });
    const state = { ...flowOf(ctx, [shJob(1, "a"), shJob(2, "b"), shJob(3, "c", [1])]), id: FLOW };
    const { steps, state: started } = stepsThrough(state, [{ type: "start", at: Date.now() }]);
    const commit = planCommit(keys, steps, Date.now());
    const creation = store.flows.creation(state, [], Date.now(), commit, "token-1");
    const first = await store.flows.commit(creation, {
      ...claim(commit.queued.map((q) => ({ queue: q, candidates: [r.id] }))),
      commitKeys: commit.keys,
    });
    expect(first.claimed.map((c) => [c.items.length, c.drained])).toEqual([[2, true]]);
    expect(started.jobs.get(1)?.status).toBe("dispatched");
    // Run again after an unknown outcome: the pending plan has no claims, and writes nothing twice.
    const again = await store.flows.commit(creation);
    expect(again).toEqual({ skipped: [1], waiting: undefined, claimed: [], invalid: [] });
    expect((await slots(r.id)).length).toBe(4);
  });
});

describe("the dispatcher's mark", () => {
  it("is written only into a context that exists", async () => {
    await store.dispatch.markWaiting(99_999, WAITING_NONE);
    expect(await redis.exec(["EXISTS", keys.context(99_999)])).toBe(0);
    await store.dispatch.markWaiting(ctx, "3");
    expect(await redis.exec(["HGET", keys.context(ctx), "dispatch_waiting"])).toBe("3");
  });
});
