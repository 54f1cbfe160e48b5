import { env } from "cloudflare:workers";
import { afterAll, beforeEach, describe, expect, it } from "vitest";
import { rebuildState, type DagJob } from "../../shared/flow/index.js";
import { Keys } from "../../shared/keys.js";
import { CALL_BYTES, callBytes, planCommit, Store, type CommitPlan } from "../../shared/store/index.js";
import { connectRedis } from "../../shared/store/redis.js";
import { deletePrefix, freshPrefix } from "../support/prefix.js";
import { flowOf, stepsThrough } from "./flow-fixtures.js";

// A flow of 10,000 jobs, all ready at once, against real Redis through the REST endpoint (which
// refuses a request or an answer over 10 MiB, as storage does): created and started by a plan too
// big for one script call, so run as several (shared/store/commit-calls.ts), each under
// CALL_BYTES; every job queued once, whether the plan runs once, again, or again after only its
// first call ran; read back whole (in several reads) and removed (the scripts' long lists sliced).

const prefix = freshPrefix("large-flow");
const redis = connectRedis({ url: env.UPSTASH_REDIS_REST_URL, token: env.UPSTASH_REDIS_REST_TOKEN });
const store = new Store(redis, new Keys(prefix));
const keys = store.keys;
afterAll(() => deletePrefix(redis, prefix));

const JOBS = 10_000;
const CALLER = 9;
let ctx: number;

beforeEach(async () => {
  ctx = (await store.contexts.create({ admins: [1], readers: [], executors: [] })).id;
});

/** 10,000 sh jobs with scripts of about 90 characters: a flow file of about 1 MiB. */
function jobs(): DagJob[] {
  return Array.from({ length: JOBS }, (_, i) => ({
    id: i + 1,
    name: `j${i}`,
    script: `echo ${"x".repeat(80)} ${i}`,
    script_type: "sh",
    timeout: 60,
    retries: 0,
    env_vars: {},
    prerequisites: [],
    depends: [],
  }));
}

/** The flow, its start, and the creation's script calls as the FlowCoordinator plans them. */
function creation() {
  const state = flowOf(ctx, jobs(), { callerId: CALLER });
  const { steps, state: started } = stepsThrough(state, [{ type: "start", at: Date.now() }]);
  const now = Date.now();
  const alone = store.flows.creation(state, [], now, undefined, "token-1");
  const commit = planCommit(keys, steps, now, undefined, CALL_BYTES - callBytes(alone));
  return { state, started, commit, plan: { ...commit, ...store.flows.withCommit(alone, commit) } };
}

const queued = () => redis.exec<number>(["LLEN", keys.queue(ctx, "sh", 1)]);
const indexed = () => redis.exec<number>(["ZCARD", keys.index(ctx, "job")]);

describe("a flow of 10,000 jobs all ready at once", () => {
  it("is created and started in several calls, each under the limit, every job queued once", async () => {
    const { plan, commit } = creation();
    const calls: Pick<CommitPlan, "keys" | "args">[] = [plan, ...(commit.more ?? [])];
    expect(calls.length).toBeGreaterThan(1);
    for (const call of calls) expect(callBytes(call)).toBeLessThanOrEqual(CALL_BYTES);
    expect(await store.flows.commit(plan)).toMatchObject({ skipped: [] });
    expect(await queued()).toBe(JOBS);
    expect(await indexed()).toBe(JOBS);
    const items = await redis.exec<string[]>(["LRANGE", keys.queue(ctx, "sh", 1), "0", "-1"]);
    expect(new Set(items.map((item) => item.split("|")[2])).size).toBe(JOBS);

    // Run again (an unknown outcome): every section is skipped, nothing is queued twice.
    const again = await store.flows.commit(plan);
    expect(again.skipped.length).toBe(commit.sections);
    expect(await queued()).toBe(JOBS);

    // Read back whole: every job and its message, in reads under the limit.
    const stored = await store.flows.load(ctx, 1);
    expect(stored?.jobs.length).toBe(JOBS);
    expect(stored?.messages.size).toBe(JOBS);
    const rebuilt = rebuildState({
      flow: stored!.flow,
      contextId: ctx,
      callerId: CALLER,
      jobs: stored!.jobs,
      messages: stored!.messages,
    });
    expect(rebuilt.jobs.size).toBe(JOBS);
    expect(rebuilt.jobs.job(JOBS).status).toBe("dispatched");
  });

  it("queues every job once when only the first call had run before the plan ran again", async () => {
    const { plan, commit } = creation();
    // The creation's call alone (the object died before the calls after it).
    await store.flows.commit({ ...plan, more: [] });
    const first = await queued();
    expect(first).toBeLessThan(JOBS);
    const again = await store.flows.commit(plan);
    expect(again.skipped.length).toBe(commit.sections - (commit.more ?? []).reduce((n, c) => n + c.sections, 0));
    expect(await queued()).toBe(JOBS);
  });

  it("is removed whole, its 10,000 index entries and 20,000 hashes in bounded calls", async () => {
    const { plan, state } = creation();
    await store.flows.commit(plan);
    const outcome = await store.retention.purge(
      {
        contextId: ctx,
        owner: { flowId: 1 },
        callerId: CALLER,
        jobIds: state.order,
        messageIds: state.order.map((id) => state.jobs.job(id).messageBase),
      },
      true,
    );
    expect(outcome).toBe("removed");
    expect(await indexed()).toBe(0);
    expect(await redis.exec<number>(["EXISTS", keys.job(ctx, CALLER, 1), keys.job(ctx, CALLER, JOBS)])).toBe(0);
  });
});
