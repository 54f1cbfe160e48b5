import { env, evictDurableObject, runDurableObjectAlarm, runInDurableObject } from "cloudflare:test";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { CLAIM_SAFETY_MS, noteRunner } from "../../functions/flow/own-claims.js";
import { generateKeyPair } from "../../shared/auth/index.js";
import { WAITING_NONE } from "../../shared/store/index.js";
import { eventually } from "../support/eventually.js";
import { takeAlarm, testWorker } from "./harness.js";

// A flow's commits claiming its own work (docs/dispatch.md, "Claims in the commit"), in the
// FlowCoordinator inside workerd, against real Redis: the claim is delivered by the object that
// made it, what the runner did not take is settled by the context's dispatcher as its own
// rounds' are, and a claim an object lost with its memory is reaped. The runner takes nothing:
// every delivery fails, which is what the dispatcher must then sort out. It is the slow runner
// (test/support/slow-runner.ts) where a test looks at a delivery under way (one to an address
// where nothing listens can be refused and settled before the test's next call), else nothing
// listens at its address (port 9).

const w = testWorker("own-claims");
afterAll(() => w.cleanup());

let admin: Awaited<ReturnType<typeof w.newActor>>;
beforeAll(async () => {
  admin = await w.newActor();
});

const job = { name: "a", script: "echo a", script_type: "sh" as const };

const NOWHERE = "http://127.0.0.1:9/";

/** A new context with one push runner of sh jobs, which takes nothing. */
async function contextWithPushRunner(concurrency = 2, address = NOWHERE) {
  const ctx = (await admin.client.createContext()).id;
  const runner = await admin.client.createRunner(ctx, {
    pubkey: (await generateKeyPair()).x,
    runner_type: "sh",
    address,
    concurrency,
  });
  return { ctx, runner };
}

/** A context whose one push runner (which takes nothing) this isolate saw take work, and no flow waiting. */
async function contextWithKnownRunner(address = NOWHERE) {
  const { ctx, runner } = await contextWithPushRunner(2, address);
  noteRunner(
    { prefix: w.prefix, contextId: ctx },
    { id: runner.id, address: runner.address, perPost: 1, pubkey: runner.pubkey, scriptTypes: ["sh"] },
  );
  await w.redis.exec(["HSET", w.keys.context(ctx), "dispatch_waiting", WAITING_NONE]);
  return { ctx, runner };
}

const slots = (ctx: number, runner: number) =>
  w.redis.exec<string[]>(["ZRANGE", w.keys.runnerSlots(ctx, runner), 0, -1]);
const queued = (ctx: number, flow: number) => w.redis.exec<number>(["LLEN", w.keys.queue(ctx, "sh", flow)]);

describe("a flow's own claims", () => {
  it("claim the first job in the flow's creation, with the alarm due by then, and give what the runner refused to the dispatcher", async () => {
    const { ctx, runner } = await contextWithKnownRunner(env.TEST_SLOW_RUNNER_URL);
    const before = Date.now();
    const flow = await admin.client.submitFlow(ctx, { start: true, jobs: [job] });
    // The commit claimed it: until its delivery is settled, the object's alarm comes within 30 s
    // (a dispatcher's claim would leave it at the job's delivery deadline, 300 s).
    const alarm = await takeAlarm(w.flowStub(ctx, flow.id).stub);
    expect(alarm).not.toBeNull();
    expect(alarm).toBeLessThanOrEqual(Date.now() + CLAIM_SAFETY_MS);
    expect(alarm).toBeGreaterThanOrEqual(before);
    expect(await slots(ctx, runner.id)).toHaveLength(1);
    expect(await queued(ctx, flow.id)).toBe(0);
    // Refused (answered 503): the dispatcher puts it back, frees the slot, backs the runner off.
    const health = await eventually(
      async () => (await admin.client.loadRunner(ctx, runner.id)).dispatch.last_error,
      10_000,
      50,
      "the refusal recorded",
    );
    expect(health).toMatch(/answered 503/);
    await eventually(
      async () => ((await queued(ctx, flow.id)) === 1 ? true : undefined),
      10_000,
      20,
      "back in its queue",
    );
    expect(await slots(ctx, runner.id)).toEqual([]);
    expect(await w.redis.exec(["HGET", w.keys.contextCounters(ctx), "refused"])).toBe("1");
    await admin.client.cancelFlow(ctx, flow.id, "no runner");
  });

  it("claim for the push runners the dispatcher named, in an isolate that has seen none of them deliver", async () => {
    const { ctx, runner } = await contextWithPushRunner(2, env.TEST_SLOW_RUNNER_URL);
    // As the context's dispatcher leaves them (the next test): the submission's reservation reads
    // the names, and the flow's object takes them as candidates (this isolate knows none).
    await w.redis.exec([
      "HSET",
      w.keys.context(ctx),
      "dispatch_waiting",
      WAITING_NONE,
      "push_runners",
      JSON.stringify([[runner.id, ["sh"]]]),
    ]);
    const flow = await admin.client.submitFlow(ctx, { start: true, jobs: [job] });
    const alarm = await takeAlarm(w.flowStub(ctx, flow.id).stub);
    expect(alarm).not.toBeNull();
    expect(alarm).toBeLessThanOrEqual(Date.now() + CLAIM_SAFETY_MS); // claimed by the commit
    expect(await slots(ctx, runner.id)).toHaveLength(1);
    await eventually(
      async () => ((await queued(ctx, flow.id)) === 1 && (await slots(ctx, runner.id)).length === 0 ? true : undefined),
      10_000,
      50,
      "refused (answered 503) and back in its queue",
    );
    await admin.client.cancelFlow(ctx, flow.id, "no runner");
  });

  it("are named by the dispatcher whenever it loads the context's runners: push runners only", async () => {
    const { ctx, runner: push } = await contextWithPushRunner(1);
    await admin.client.createRunner(ctx, { pubkey: (await generateKeyPair()).x, runner_type: "sh", local: true });
    // Each change of a runner wakes the dispatcher, which loads the list again and names them.
    const named = (want: string) =>
      eventually(
        async () =>
          (await w.redis.exec<string | null>(["HGET", w.keys.context(ctx), "push_runners"])) === want
            ? true
            : undefined,
        10_000,
        50,
        `push_runners ${want}`,
      );
    await named(JSON.stringify([[push.id, ["sh"]]]));
    await admin.client.deleteRunner(ctx, push.id);
    await named("[]");
  });

  it("have a claim the object lost with its memory reaped by the dispatcher and delivered", async () => {
    const { ctx, runner } = await contextWithKnownRunner();
    // Paused, nothing claims the job: the test claims it as a commit would have, the object dies
    // before delivering it (the item moves from the queue to the runner's slots, nobody is told).
    // The reaper asks owners about unsettled claims whether or not dispatch is paused.
    await admin.client.setPaused(ctx, true);
    const flow = await admin.client.submitFlow(ctx, { start: true, jobs: [job] });
    const { stub } = w.flowStub(ctx, flow.id);
    const queue = w.keys.queue(ctx, "sh", flow.id);
    const item = await w.redis.exec<string | null>(["LPOP", queue]);
    if (!item) throw new Error("the job was not queued");
    const claimedAt = Date.now() - 31_000;
    await w.redis.exec(["ZADD", w.keys.runnerSlots(ctx, runner.id), String(claimedAt), item]);
    await evictDurableObject(stub);
    // Its alarm wakes a fresh object, which cannot tell whether it claimed its waiting job: the
    // dispatcher is asked to reap, finds the claim old enough, and has the owner deliver it.
    await runInDurableObject(stub, (instance) => instance.alarm());
    await eventually(
      async () => ((await slots(ctx, runner.id)).length === 0 && (await queued(ctx, flow.id)) === 1 ? true : undefined),
      10_000,
      50,
      "the reaped claim delivered (refused: nothing listens) and back in its queue",
    );
    expect((await admin.client.loadRunner(ctx, runner.id)).dispatch.last_error).toMatch(/could not be reached/);
    await runDurableObjectAlarm(w.dispatcherStub(ctx));
    await admin.client.cancelFlow(ctx, flow.id, "no runner");
  });
});
