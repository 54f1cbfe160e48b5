import { describe, expect, it } from "vitest";
import { REVOCATION_CHECK_MS } from "../../functions/core/key-cache.js";
import { actorKeyId, generateKeyPair } from "../../shared/auth/index.js";
import { ApiError, signerFromJwk, type CoordinatorClient } from "../../shared/client/index.js";
import { eventually } from "../support/eventually.js";
import { answersIn, flowEnd } from "../support/flow-runs.js";
import type { ExtraWorker } from "../support/private-stack.js";
import { usePrivateStack } from "../support/use-private-stack.js";

// A Redis wiped under a live stack (FLUSHALL; a Redis without persistence that restarted is the
// same to the coordinator): two Worker processes have the old actor's key, its context and its
// runner cached, a flow is running, and the database then gives the same ids to a newcomer.
// Every process must find out within the revocation bound (REVOCATION_CHECK_MS), not after the
// 300 s its caches keep keys: the newcomer's key works as actor 1, the old key is refused, the
// old tenant's runner gets none of the new tenant's work, the old flow leaves nothing behind, and
// nothing answers 5xx. The newcomer then registers a runner and runs flows.

const { stack, admin } = usePrivateStack("redis-reset", { vars: { KEY_CACHE_SECONDS: "300" } });

/** Looked for well within the caches' 300 s: what happens sooner comes from the identity. */
const WELL_BEFORE_TTL_MS = 60_000;

const job = (name: string, depends: string[] = []) => ({ name, script: "true", script_type: "sh" as const, depends });

/** The status a call was answered with (its ApiError's, 200 when it succeeded). */
async function statusOf(call: () => Promise<unknown>): Promise<number> {
  try {
    await call();
    return 200;
  } catch (error) {
    if (error instanceof ApiError) return error.status;
    throw error;
  }
}

/** Calls `call` until it is answered `status`; how long after `since` that was (ms). */
async function answeredAfter(call: () => Promise<unknown>, status: number, since: number): Promise<number> {
  await eventually(
    async () => ((await statusOf(call)) === status ? true : undefined),
    WELL_BEFORE_TTL_MS,
    50,
    `an answer ${status}`,
  );
  return Date.now() - since;
}

/** The requests a Worker process answered 5xx, from its log. */
const serverErrors = (log: string) => log.split("\n").filter((line) => /^\[wrangler:info\] \S+ \S+ 5\d\d /.test(line));

describe("a Redis wiped under a live stack", () => {
  it("drops every process's caches within the bound, and the newcomer under the old ids runs flows", async () => {
    const old = admin();
    const b: ExtraWorker = await stack().startWorker();
    const ctx = (await old.client.createContext()).id;
    const registered = await stack().registerTestRunner(old.client, ctx, { WORK_MS: "3000" });
    const oldRunner = await registered.start();
    const running = await old.client.submitFlow(ctx, { start: true, jobs: [job("held"), job("after", ["held"])] });
    await oldRunner.waitForLine(/^ran held /);
    const oldOnB = b.anonymous.as(await signerFromJwk(old.jwk, actorKeyId(old.id)));
    // Both processes hold the old key (and process A the context and the runner) in their caches.
    await old.client.loadFlow(ctx, running.id);
    await oldOnB.loadActor(old.id);
    const logA = stack().workerLog().length;

    const wipedAt = Date.now();
    await stack().redis.exec(["FLUSHALL"]);
    const jwk = await generateKeyPair();
    const newcomer = await stack().anonymous.registerActor(jwk);
    expect(newcomer.id).toBe(old.id);
    const fresh: CoordinatorClient = stack().anonymous.as(await signerFromJwk(jwk, actorKeyId(newcomer.id)));
    const freshOnB = b.anonymous.as(await signerFromJwk(jwk, actorKeyId(newcomer.id)));
    const timings = {
      newcomerOnA: await answeredAfter(() => fresh.loadActor(newcomer.id), 200, wipedAt),
      oldRefusedOnA: await answeredAfter(() => old.client.loadActor(old.id), 401, wipedAt),
      newcomerOnB: await answeredAfter(() => freshOnB.loadActor(newcomer.id), 200, wipedAt),
      oldRefusedOnB: await answeredAfter(() => oldOnB.loadActor(old.id), 401, wipedAt),
    };
    console.log(`after the wipe (ms; caches keep keys 300 s): ${JSON.stringify(timings)}`);
    for (const ms of Object.values(timings)) expect(ms).toBeLessThan(WELL_BEFORE_TTL_MS);
    // Once a process read the new database, it never goes back to the old key.
    expect(await statusOf(() => old.client.loadActor(old.id))).toBe(401);
    expect(await statusOf(() => oldOnB.loadActor(old.id))).toBe(401);

    // The newcomer's context takes the old one's id; its first flow (the old flow's id too)
    // waits for a runner of its own: the old tenant's runner gets nothing of it.
    expect((await fresh.createContext()).id).toBe(ctx);
    const first = await fresh.submitFlow(ctx, { start: true, jobs: [job("mine")] });
    expect(first.id).toBe(running.id);
    expect((await fresh.loadFlow(ctx, first.id)).jobs.map((j) => [j.key, j.status])).toEqual([["mine", "dispatched"]]);
    // The old runner's result for `held` is refused (its runner is gone), and writes nothing.
    const [late] = await answersIn(oldRunner, "answered result held ", 1);
    expect(late).toMatch(/ 401 /);
    await new Promise((resolve) => setTimeout(resolve, REVOCATION_CHECK_MS));
    // (It would take it as a duplicate: it ran flow 1, job 1, attempt 1 of the old database.)
    expect(oldRunner.stdout()).not.toMatch(/^(ran|duplicate) mine /m);
    const records = (await stack().redis.exec<string[]>(["KEYS", "*"])).filter((k) => /:(flow|job|message):\d/.test(k));
    expect(records.sort()).toEqual(
      [
        stack().keys.flow(ctx, first.id),
        stack().keys.job(ctx, newcomer.id, 1),
        stack().keys.message(ctx, newcomer.id, 1),
      ].sort(),
    );

    // A runner of the newcomer's (it takes the old runner's id too) runs the waiting flow and more.
    const mine = await (await stack().registerTestRunner(fresh, ctx)).start();
    expect((await flowEnd(fresh, ctx, first.id)).status).toBe("finished");
    const second = await fresh.submitFlow(ctx, { start: true, jobs: [job("a"), job("b", ["a"])] });
    // (Flows only through process A: each `wrangler dev` has Durable Objects of its own.)
    const third = await fresh.submitFlow(ctx, { start: true, jobs: [job("c")] });
    for (const flow of [second, third]) expect((await flowEnd(fresh, ctx, flow.id)).status).toBe("finished");
    expect(mine.stdout()).not.toMatch(/^ran (held|after) /m);
    expect(oldRunner.stdout()).not.toMatch(/^ran (mine|a|b|c) /m);

    expect(serverErrors(stack().workerLog().slice(logA))).toEqual([]);
    expect(serverErrors(b.log())).toEqual([]);
  });
});
