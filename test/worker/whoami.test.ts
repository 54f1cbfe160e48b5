import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { bareKeyId, generateKeyPair, runnerKeyId, type PrivateJwk } from "../../shared/auth/index.js";
import type { CoordinatorClient } from "../../shared/client/index.js";
import type { WhoAmI } from "../../shared/model/index.js";
import { testWorker } from "./harness.js";

// GET /v1/whoami: who the key that signed belongs to, so flowc and the console can say "this is
// runner 2's key in context 5" or "this key is nobody's" instead of "unknown key". Runners are
// found through the global hint runner_key:<pubkey>, written after each runner's own script and
// checked against the context's runner_keys on every read.

const w = testWorker("whoami");
afterAll(() => w.cleanup());

let admin: Awaited<ReturnType<typeof w.newActor>>;

beforeAll(async () => {
  admin = await w.newActor();
});

/** Asks whoami signed with the bare key (`key:<pubkey>`), as someone holding a key file does. */
const asKey = async (jwk: PrivateJwk): Promise<WhoAmI> => (await w.clientFor(jwk, bareKeyId(jwk.x))).whoAmI();

describe("GET /v1/whoami", () => {
  it("names the actor of an actor's key, and nobody for a key nobody registered", async () => {
    expect(await admin.client.whoAmI()).toEqual({
      keyid: `actor:${admin.actor.id}`,
      pubkey: admin.jwk.x,
      actor_id: admin.actor.id,
      runners: [],
    });
    expect(await asKey(admin.jwk)).toMatchObject({ keyid: bareKeyId(admin.jwk.x), actor_id: admin.actor.id });
    const stranger = await generateKeyPair();
    expect(await asKey(stranger)).toEqual({ keyid: bareKeyId(stranger.x), pubkey: stranger.x, runners: [] });
    // Over JSON-RPC, the same.
    expect(await admin.client.rpc("actor.whoami", {})).toMatchObject({ actor_id: admin.actor.id });
  });

  it("names the runners of a runner's key in every context, follows a change of key and a removal", async () => {
    const client: CoordinatorClient = admin.client;
    const [one, two] = [(await client.createContext()).id, (await client.createContext()).id];
    const key = await generateKeyPair();
    const pull = { pubkey: key.x, runner_type: "sh" as const, local: true };
    const r1 = await client.createRunner(one, pull);
    const r2 = await client.createRunner(two, pull);
    const both = [
      { context_id: one, runner_id: r1.id },
      { context_id: two, runner_id: r2.id },
    ];
    expect(await asKey(key)).toEqual({ keyid: bareKeyId(key.x), pubkey: key.x, runners: both });
    // The runner itself may ask too.
    const runner = await w.clientFor(key, runnerKeyId(one, r1.id));
    expect(await runner.whoAmI()).toMatchObject({ keyid: runnerKeyId(one, r1.id), runners: both });

    // Runner 1 gets another key: the old key is runner 2's alone, the new one runner 1's.
    const next = await generateKeyPair();
    await client.updateRunner(one, r1.id, { pubkey: next.x });
    expect((await asKey(key)).runners).toEqual([{ context_id: two, runner_id: r2.id }]);
    expect((await asKey(next)).runners).toEqual([{ context_id: one, runner_id: r1.id }]);
    // Runner 2 is removed: the key is nobody's.
    await client.deleteRunner(two, r2.id);
    expect((await asKey(key)).runners).toEqual([]);
  });

  it("forgets the runners of a deleted context", async () => {
    const ctx = (await admin.client.createContext()).id;
    const key = await generateKeyPair();
    const runner = await admin.client.createRunner(ctx, { pubkey: key.x, runner_type: "sh", local: true });
    expect((await asKey(key)).runners).toEqual([{ context_id: ctx, runner_id: runner.id }]);
    expect(await admin.client.deleteContext(ctx)).toBe(true);
    expect((await asKey(key)).runners).toEqual([]);
    // Not left behind in the hint either.
    expect(await w.redis.exec(["HGET", w.keys.runnersByKey(key.x), String(ctx)])).toBeNull();
  });

  it("names no runner an entry left behind points at (a runner gone, another key in its place)", async () => {
    const ctx = (await admin.client.createContext()).id;
    const key = await generateKeyPair();
    const runner = await admin.client.createRunner(ctx, { pubkey: key.x, runner_type: "sh", local: true });
    // As if the hint had been written for runners that do not hold the key (a write lost between the two).
    await w.redis.exec(["HSET", w.keys.runnersByKey(key.x), String(ctx + 1000), "7", String(ctx), "99"]);
    expect((await asKey(key)).runners).toEqual([]);
    await w.redis.exec(["HSET", w.keys.runnersByKey(key.x), String(ctx), String(runner.id)]);
    expect((await asKey(key)).runners).toEqual([{ context_id: ctx, runner_id: runner.id }]);
  });
});
