import { describe, expect, it } from "vitest";
import { REVOCATION_CHECK_MS } from "../../functions/core/key-cache.js";
import { actorKeyId, generateKeyPair, runnerKeyId, type PrivateJwk } from "../../shared/auth/index.js";
import { ApiError, signerFromJwk, type CoordinatorClient } from "../../shared/client/index.js";
import { eventually } from "../support/eventually.js";
import { commandDelta, type ExtraWorker } from "../support/private-stack.js";
import { usePrivateStack } from "../support/use-private-stack.js";

// A removed or rotated key stops working in every Worker process within the revocation bound
// (REVOCATION_CHECK_MS plus the request under way), although each process caches public keys
// for KEY_CACHE_SECONDS (300 s here): keys cached in process A, changed through process B, are
// refused by A long before its cache would have let them go. A change that does not bump the
// key epoch (written straight into Redis) shows what the cache alone would do: A keeps
// accepting the old key.

const { stack, admin } = usePrivateStack("revocation", { cron: false, vars: { KEY_CACHE_SECONDS: "300" } });

/** Refusals are looked for well within the cache's 300 s, so a refusal can only come from the epoch. */
const WELL_BEFORE_TTL_MS = 60_000;

let second: ExtraWorker | undefined;
const secondWorker = async () => (second ??= await stack().startWorker());

async function clientOn(url: string, jwk: PrivateJwk, keyid: string): Promise<CoordinatorClient> {
  const base = url === stack().url ? stack().anonymous : (await secondWorker()).anonymous;
  return base.as(await signerFromJwk(jwk, keyid));
}

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

/** Calls `call` until it is answered 401; how long after `since` that was (ms). */
async function refusedAfter(call: () => Promise<unknown>, since: number): Promise<number> {
  await eventually(
    async () => ((await statusOf(call)) === 401 ? true : undefined),
    WELL_BEFORE_TTL_MS,
    50,
    "the revoked key refused",
  );
  return Date.now() - since;
}

describe("key revocation across Worker processes", () => {
  it("refuses a removed runner's key in a process that cached it, within the bound", async () => {
    const b = await secondWorker();
    const ctx = await admin().client.createContext();
    const jwk = await generateKeyPair();
    const runner = await admin().client.createRunner(ctx.id, { pubkey: jwk.x, runner_type: "sh", local: true });
    const keyid = runnerKeyId(ctx.id, runner.id);
    const onA = await clientOn(stack().url, jwk, keyid);
    const load = () => onA.loadRunner(ctx.id, runner.id);
    await load();
    await load(); // cached in A now

    // A key changed behind the coordinator's back (no epoch bump): B, which never cached the
    // runner's key, reads the new one and refuses the old; A goes on trusting its cache, past
    // the revocation check's interval, as it would for the cache's 300 s.
    const other = await generateKeyPair();
    await stack().redis.exec(["HSET", stack().keys.runner(ctx.id, runner.id), "pubkey", other.x]);
    expect(await statusOf(async () => (await clientOn(b.url, jwk, keyid)).loadRunner(ctx.id, runner.id))).toBe(401);
    const until = Date.now() + 3 * REVOCATION_CHECK_MS;
    while (Date.now() < until) {
      expect(await statusOf(load)).toBe(200);
      await new Promise((r) => setTimeout(r, REVOCATION_CHECK_MS / 4));
    }

    // Removed through B: the epoch is bumped, and A refuses the key.
    await (await clientOn(b.url, admin().jwk, actorKeyId(admin().id))).deleteRunner(ctx.id, runner.id);
    const ms = await refusedAfter(load, Date.now());
    console.log(`runner key refused in process A ${ms} ms after its removal through B (cache: 300 s)`);
    expect(ms).toBeLessThan(WELL_BEFORE_TTL_MS);
  });

  it("refuses a rotated actor key in a process that cached it, and takes the new one", async () => {
    const actor = await stack().newActor(); // its client signs through A
    await actor.client.loadActor(actor.id);
    await actor.client.loadActor(actor.id); // cached in A now
    const next = await generateKeyPair();
    await (await clientOn((await secondWorker()).url, actor.jwk, actorKeyId(actor.id))).rotateKey(actor.id, next);
    const ms = await refusedAfter(() => actor.client.loadActor(actor.id), Date.now());
    console.log(`actor key refused in process A ${ms} ms after its rotation through B (cache: 300 s)`);
    expect(ms).toBeLessThan(WELL_BEFORE_TTL_MS);
    const rotated = await clientOn(stack().url, next, actorKeyId(actor.id));
    expect((await rotated.loadActor(actor.id)).pubkey).toBe(next.x);
  });

  it("costs at most one MGET of the epoch (and the database's identity) per process per interval while keys are served from its cache", async () => {
    const actor = await stack().newActor();
    await actor.client.loadActor(actor.id); // cached in A now
    const before = await stack().quietCommandStats();
    const started = Date.now();
    const requests = 30;
    for (let i = 0; i < requests; i++) {
      await actor.client.loadActor(actor.id);
      await new Promise((r) => setTimeout(r, 100));
    }
    const elapsed = Date.now() - started;
    const { byCommand } = commandDelta(before, await stack().quietCommandStats());
    const gets = byCommand["mget"] ?? 0;
    console.log(`${requests} signed requests over ${elapsed} ms: ${gets} MGET of the key epoch`);
    expect(gets).toBeGreaterThanOrEqual(1);
    expect(gets).toBeLessThanOrEqual(Math.ceil(elapsed / REVOCATION_CHECK_MS) + 1);
  });
});
