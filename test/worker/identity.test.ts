import { afterAll, describe, expect, it } from "vitest";
import { generateKeyPair } from "../../shared/auth/index.js";
import { failure, testWorker } from "./harness.js";

const w = testWorker("identity");
afterAll(() => w.cleanup());

describe("actors", () => {
  it("registers with proof of possession and is idempotent for the same key", async () => {
    const jwk = await generateKeyPair();
    const actor = await w.anonymous.registerActor(jwk, {
      address: [{ type: "https", url: "https://alice.example/inbox" }],
    });
    expect(actor).toMatchObject({ pubkey: jwk.x, address: [{ type: "https", url: "https://alice.example/inbox" }] });
    const again = await w.anonymous.registerActor(jwk);
    expect(again.id).toBe(actor.id);
  });

  it("refuses a chosen id taken by another key with 409", async () => {
    const { actor } = await w.newActor();
    const other = await generateKeyPair();
    const error = await failure(w.anonymous.registerActor(other, { id: actor.id }));
    expect(error.status).toBe(409);
    expect(error.problem.type).toBe("/problems/conflict");
  });

  it("loads, updates own addresses, and refuses updating someone else's", async () => {
    const alice = await w.newActor();
    const bob = await w.newActor();
    expect((await bob.client.loadActor(alice.actor.id)).pubkey).toBe(alice.jwk.x);
    const updated = await alice.client.updateActor(alice.actor.id, {
      address: [{ type: "mycelium", address: "4ab::1" }],
    });
    expect(updated.address).toEqual([{ type: "mycelium", address: "4ab::1" }]);
    const error = await failure(bob.client.updateActor(alice.actor.id, { address: [] }));
    expect(error.status).toBe(403);
  });

  it("rotates a key: the old one stops working, the new one works", async () => {
    const alice = await w.newActor();
    const next = await generateKeyPair();
    const { actor, client } = await alice.client.rotateKey(alice.actor.id, next);
    expect(actor.pubkey).toBe(next.x);
    expect((await client.loadActor(alice.actor.id)).pubkey).toBe(next.x);
    const stale = await failure(alice.client.loadActor(alice.actor.id));
    expect(stale.status).toBe(401);
    expect(stale.code).toBe("signature-invalid");
  });
});

describe("contexts and runners", () => {
  it("takes a new user from nothing to a context with a runner", async () => {
    const admin = await w.newActor();
    const reader = await w.newActor();
    const context = await admin.client.createContext({ readers: [reader.actor.id] });
    expect(context.admins).toEqual([admin.actor.id]);
    const runnerKey = await generateKeyPair();
    const runner = await admin.client.createRunner(context.id, {
      pubkey: runnerKey.x,
      runner_type: "python",
      address: "https://runner.example/jobs",
    });
    expect(runner).toMatchObject({
      context_id: context.id,
      topic: `runner${runner.id}`,
      local: false,
      script_types: ["python"],
      concurrency: 1,
    });
    expect((await reader.client.listRunners(context.id)).items.map((r) => r.id)).toEqual([runner.id]);
    const denied = await failure(
      reader.client.createRunner(context.id, { pubkey: runnerKey.x, runner_type: "python", local: true }),
    );
    expect(denied.status).toBe(403);
    expect(denied.problem.needed).toEqual(["admins"]);
  });
});
