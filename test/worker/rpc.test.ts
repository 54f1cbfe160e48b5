import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { actorKeyId, bareKeyId, generateKeyPair, importPrivateKey, type PrivateJwk } from "../../shared/auth/index.js";
import type { CoordinatorClient } from "../../shared/client/index.js";
import { Actor, Context, ContextDetails, Runner, RunnerWithDispatch } from "../../shared/model/index.js";
import { BASE, failure, signed, testWorker } from "./harness.js";

const w = testWorker("rpc");
afterAll(() => w.cleanup());

let admin: { id: number; jwk: PrivateJwk; client: CoordinatorClient };
let outsider: { id: number; client: CoordinatorClient };

beforeAll(async () => {
  const a = await w.newActor();
  admin = { id: a.actor.id, jwk: a.jwk, client: a.client };
  const o = await w.newActor();
  outsider = { id: o.actor.id, client: o.client };
});

/** Posts a raw JSON-RPC body signed by the admin. */
async function rpcRaw(body: string): Promise<Response> {
  return w.fetch(await signed("POST", "/rpc", admin.jwk, actorKeyId(admin.id), undefined, { raw: body }));
}

describe("JSON-RPC methods", () => {
  it("actor.create (signed by the new key) and actor.load", async () => {
    const jwk = await generateKeyPair();
    const self = w.anonymous.as({ keyid: bareKeyId(jwk.x), key: await importPrivateKey(jwk) });
    const actor = await self.rpc("actor.create", { pubkey: jwk.x }, Actor);
    expect(actor.pubkey).toBe(jwk.x);
    expect(await admin.client.rpc("actor.load", { id: actor.id }, Actor)).toEqual(actor);
  });

  it("context.create, context.load, runner.create, runner.load", async () => {
    const context = await admin.client.rpc("context.create", {}, Context);
    expect(context.admins).toEqual([admin.id]);
    const loaded = await admin.client.rpc("context.load", { id: context.id }, ContextDetails);
    expect(loaded).toMatchObject(context);
    expect(loaded.stored.runners).toBe(0);
    const runner = await admin.client.rpc(
      "runner.create",
      { context_id: context.id, pubkey: (await generateKeyPair()).x, runner_type: "python", local: true },
      Runner,
    );
    expect(runner.context_id).toBe(context.id);
    expect(
      await admin.client.rpc("runner.load", { context_id: context.id, id: runner.id }, RunnerWithDispatch),
    ).toEqual({ ...runner, dispatch: { in_flight: 0 } });
  });

  it("maps errors to JSON-RPC codes with the problem in data", async () => {
    const context = await admin.client.rpc("context.create", {}, Context);
    const forbidden = await failure(outsider.client.rpc("context.load", { id: context.id }));
    expect([forbidden.rpcCode, forbidden.status, forbidden.code]).toEqual([-32003, 403, "forbidden"]);
    const missing = await failure(admin.client.rpc("context.load", { id: 999_999 }));
    expect([missing.rpcCode, missing.status]).toEqual([-32004, 404]);
    const invalid = await failure(
      admin.client.rpc("runner.create", { context_id: context.id, pubkey: "short", runner_type: "python" }),
    );
    expect([invalid.rpcCode, invalid.status, invalid.problem.field]).toEqual([-32602, 400, "params.pubkey"]);
    const taken = await failure(admin.client.rpc("context.create", { id: context.id }));
    expect([taken.rpcCode, taken.status]).toEqual([-32009, 409]);
  });

  it("answers protocol errors: unknown method, bad envelope, parse error", async () => {
    const unknown = (await (
      await rpcRaw(JSON.stringify({ jsonrpc: "2.0", id: 7, method: "flow.fly", params: {} }))
    ).json()) as { id: number; error: { code: number } };
    expect(unknown).toMatchObject({ id: 7, error: { code: -32601 } });
    const envelope = (await (await rpcRaw(JSON.stringify({ id: 1, method: "actor.load" }))).json()) as {
      error: { code: number };
    };
    expect(envelope.error.code).toBe(-32600);
    const parse = (await (await rpcRaw("{nope")).json()) as { error: { code: number } };
    expect(parse.error.code).toBe(-32700);
    const empty = (await (await rpcRaw("[]")).json()) as { error: { code: number } };
    expect(empty.error.code).toBe(-32600);
  });

  it("runs batches in order and answers notifications with nothing", async () => {
    const res = await rpcRaw(
      JSON.stringify([
        { jsonrpc: "2.0", id: "a", method: "actor.load", params: { id: admin.id } },
        { jsonrpc: "2.0", method: "actor.load", params: { id: admin.id } },
        { jsonrpc: "2.0", id: "b", method: "actor.load", params: { id: 999_999 } },
      ]),
    );
    const answers = (await res.json()) as { id: string; result?: unknown; error?: { code: number } }[];
    expect(answers.map((a) => a.id)).toEqual(["a", "b"]);
    expect(answers[0]?.result).toMatchObject({ id: admin.id });
    expect(answers[1]?.error?.code).toBe(-32004);
    const notification = await rpcRaw(
      JSON.stringify({ jsonrpc: "2.0", method: "actor.load", params: { id: admin.id } }),
    );
    expect(notification.status).toBe(204);
  });

  it("refuses unsigned and replayed calls with 401 and a JSON-RPC error", async () => {
    const unsigned = await w.fetch(
      new Request(`${BASE}/rpc`, {
        method: "POST",
        body: JSON.stringify({ jsonrpc: "2.0", id: 1, method: "actor.load", params: { id: 1 } }),
      }),
    );
    expect(unsigned.status).toBe(401);
    expect(await unsigned.json()).toMatchObject({
      jsonrpc: "2.0",
      id: null,
      error: { code: -32001, data: { type: "/problems/signature-missing" } },
    });
    const request = await signed("POST", "/rpc", admin.jwk, actorKeyId(admin.id), {
      jsonrpc: "2.0",
      id: 1,
      method: "context.create",
      params: {},
    });
    const replay = request.clone();
    expect((await w.fetch(request)).status).toBe(200);
    const replayed = await w.fetch(replay);
    expect(replayed.status).toBe(401);
    expect(await replayed.json()).toMatchObject({
      error: { code: -32001, data: { type: "/problems/nonce-replayed" } },
    });
  });
});
