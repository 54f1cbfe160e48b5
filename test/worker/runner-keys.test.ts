import { env } from "cloudflare:workers";
import { afterAll, beforeAll, beforeEach, describe, expect, it } from "vitest";
import { generateKeyPair, runnerKeyId } from "../../shared/auth/index.js";
import type { CoordinatorClient } from "../../shared/client/index.js";
import type { Runner, RunnerRegistration } from "../../shared/model/index.js";
import { connectStore, RunnerKeyTakenError, type Store } from "../../shared/store/index.js";
import { failure, testWorker } from "./harness.js";

// A public key is one runner's in a context: registering it again, or patching another runner to
// it, is refused 409 naming the runner that holds it, atomically (one script with the record);
// removing a runner or changing its key frees it. Runners registered before the key index existed
// are indexed before the first check.

const w = testWorker("runner-keys");
afterAll(() => w.cleanup());

let admin: CoordinatorClient;
let ctx: number;
let store: Store;

beforeAll(async () => {
  admin = (await w.newActor()).client;
  store = connectStore({ url: env.UPSTASH_REDIS_REST_URL, token: env.UPSTASH_REDIS_REST_TOKEN }, w.keys);
});
beforeEach(async () => {
  ctx = (await admin.createContext()).id;
});

const pull = (pubkey: string): RunnerRegistration => ({ pubkey, runner_type: "sh", local: true });
const newKey = async () => (await generateKeyPair()).x;
const holderOf = (pubkey: string) => w.redis.exec<string | null>(["HGET", w.keys.runnerKeys(ctx), pubkey]);

describe("one key, one runner", () => {
  it("refuses a second registration of a key in a context, naming the holder; another context may use it", async () => {
    const key = await newKey();
    const first = await admin.createRunner(ctx, pull(key));
    const again = await failure(admin.createRunner(ctx, pull(key)));
    expect([again.status, again.code, again.problem.field, again.problem.runner_id]).toEqual([
      409,
      "conflict",
      "body.pubkey",
      first.id,
    ]);
    expect(again.problem.detail).toContain(`already runner ${first.id}'s in context ${ctx}`);
    // Refused over JSON-RPC the same way, and with a chosen id too; nothing was written.
    const rpc = await failure(admin.rpc("runner.create", { context_id: ctx, ...pull(key) }));
    expect([rpc.rpcCode, rpc.problem.runner_id]).toEqual([-32009, first.id]);
    expect((await failure(admin.createRunner(ctx, { ...pull(key), id: 900 }))).problem.runner_id).toBe(first.id);
    expect((await admin.listRunners(ctx)).items.map((r) => r.id)).toEqual([first.id]);

    const other = (await admin.createContext()).id;
    expect((await admin.createRunner(other, pull(key))).pubkey).toBe(key);
  });

  it("lets one of many registrations of a key racing each other win", async () => {
    const key = await newKey();
    const answers = await Promise.allSettled(Array.from({ length: 6 }, () => admin.createRunner(ctx, pull(key))));
    const won = answers.filter((a): a is PromiseFulfilledResult<Runner> => a.status === "fulfilled");
    expect(won).toHaveLength(1);
    expect(answers.filter((a) => a.status === "rejected")).toHaveLength(5);
    expect((await admin.listRunners(ctx)).total).toBe(1);
    expect(await holderOf(key)).toBe(String(won[0]?.value.id));
  });

  it("refuses patching a runner to another's key; its own key, and a retried patch, are fine", async () => {
    const [a, b] = [
      await admin.createRunner(ctx, pull(await newKey())),
      await admin.createRunner(ctx, pull(await newKey())),
    ];
    const refused = await failure(admin.updateRunner(ctx, b.id, { pubkey: a.pubkey, concurrency: 7 }));
    expect([refused.status, refused.problem.field, refused.problem.runner_id]).toEqual([409, "body.pubkey", a.id]);
    expect(await admin.loadRunner(ctx, b.id)).toMatchObject({ pubkey: b.pubkey, concurrency: 1 }); // nothing written

    const patched = await admin.updateRunner(ctx, a.id, { pubkey: a.pubkey, concurrency: 3, deliveries_per_post: 8 });
    expect(patched).toMatchObject({ concurrency: 3, deliveries_per_post: 8 });
    const fresh = await newKey();
    const moved = await admin.updateRunner(ctx, b.id, { pubkey: fresh });
    expect(moved.pubkey).toBe(fresh);
    expect(await admin.updateRunner(ctx, b.id, { pubkey: fresh })).toMatchObject({ id: b.id, pubkey: fresh });
    expect([await holderOf(fresh), await holderOf(b.pubkey)]).toEqual([String(b.id), null]);
    // The key b gave up is free again.
    expect((await admin.createRunner(ctx, pull(b.pubkey))).pubkey).toBe(b.pubkey);
  });

  it("frees a key when its runner is removed; the old runner's signatures stop working", async () => {
    const jwk = await generateKeyPair();
    const old = await admin.createRunner(ctx, pull(jwk.x));
    const asOld = await w.clientFor(jwk, runnerKeyId(ctx, old.id));
    expect((await asOld.loadRunner(ctx, old.id)).id).toBe(old.id);
    await admin.deleteRunner(ctx, old.id);
    expect(await holderOf(jwk.x)).toBeNull();
    const renewed = await admin.createRunner(ctx, pull(jwk.x));
    expect(renewed.id).not.toBe(old.id);
    expect((await failure(asOld.loadRunner(ctx, old.id))).status).toBe(401);
    const asRenewed = await w.clientFor(jwk, runnerKeyId(ctx, renewed.id));
    expect((await asRenewed.loadRunner(ctx, renewed.id)).id).toBe(renewed.id);
  });
});

describe("the store's side", () => {
  const input = (contextId: number, pubkey: string) => ({
    context_id: contextId,
    pubkey,
    address: "",
    topic: "",
    local: true,
    runner_type: "sh" as const,
    script_types: ["sh" as const],
    concurrency: 1,
    deliveries_per_post: 1,
  });

  it("answers a create retried with its own token with the runner it created, and refuses any other", async () => {
    const key = await newKey();
    const token = crypto.randomUUID();
    const created = await store.runners.create({ ...input(ctx, key), id: 40 }, token);
    expect(await store.runners.create({ ...input(ctx, key), id: 40 }, token)).toMatchObject({ id: 40, pubkey: key });
    await expect(store.runners.create({ ...input(ctx, key), id: 41 })).rejects.toBeInstanceOf(RunnerKeyTakenError);
    expect((await store.runners.list({ context_id: ctx })).items).toEqual([created]);
  });
});
