import { afterAll, beforeAll, describe, expect, it } from "vitest";
import {
  actorKeyId,
  bareKeyId,
  generateKeyPair,
  importPrivateKey,
  runnerKeyId,
  type PrivateJwk,
} from "../../shared/auth/index.js";
import type { CoordinatorClient } from "../../shared/client/index.js";
import type { Context, Runner } from "../../shared/model/index.js";
import { keysUnder } from "../support/prefix.js";
import { BASE, failure, signed, testWorker } from "./harness.js";

// The signature and permission matrix: every case asserts the status and the problem type.

const w = testWorker("auth");
afterAll(() => w.cleanup());

interface Party {
  id: number;
  jwk: PrivateJwk;
  client: CoordinatorClient;
}

let admin: Party, reader: Party, executor: Party, outsider: Party;
let context: Context, otherContext: Context;
let runnerA: Runner, runnerB: Runner;
let runnerAKey: PrivateJwk;

beforeAll(async () => {
  const make = async (): Promise<Party> => {
    const { actor, jwk, client } = await w.newActor();
    return { id: actor.id, jwk, client };
  };
  [admin, reader, executor, outsider] = [await make(), await make(), await make(), await make()];
  context = await admin.client.createContext({ readers: [reader.id], executors: [executor.id] });
  otherContext = await outsider.client.createContext();
  runnerAKey = await generateKeyPair();
  runnerA = await admin.client.createRunner(context.id, { pubkey: runnerAKey.x, runner_type: "sh", local: true });
  runnerB = await admin.client.createRunner(context.id, {
    pubkey: (await generateKeyPair()).x,
    runner_type: "sh",
    local: true,
  });
});

/** Sends and returns status, problem type and body. */
async function send(request: Request): Promise<{ status: number; type: string; body: Record<string, unknown> }> {
  const res = await w.fetch(request);
  const body = (await res.json()) as Record<string, unknown>;
  if (res.status >= 400) expect(res.headers.get("content-type")).toBe("application/problem+json");
  return { status: res.status, type: String(body.type), body };
}

const now = () => Math.floor(Date.now() / 1000);

describe("signatures", () => {
  it("refuses an unsigned request: 401 signature-missing, telling what to sign", async () => {
    const res = await w.fetch(new Request(`${BASE}/v1/contexts/${context.id}`));
    expect(res.status).toBe(401);
    expect(res.headers.get("accept-signature")).toContain('"@target-uri"');
    expect(((await res.json()) as { type: string }).type).toBe("/problems/signature-missing");
  });

  it("accepts a correctly signed request", async () => {
    const r = await send(await signed("GET", `/v1/contexts/${context.id}`, admin.jwk, actorKeyId(admin.id)));
    expect(r.status).toBe(200);
  });

  it("refuses a signature by the wrong key: 401 signature-invalid", async () => {
    const r = await send(await signed("GET", `/v1/contexts/${context.id}`, outsider.jwk, actorKeyId(admin.id)));
    expect([r.status, r.type]).toEqual([401, "/problems/signature-invalid"]);
  });

  it("refuses an expired signature: 401 signature-expired", async () => {
    const r = await send(
      await signed("GET", `/v1/contexts/${context.id}`, admin.jwk, actorKeyId(admin.id), undefined, {
        created: now() - 301,
      }),
    );
    expect([r.status, r.type]).toEqual([401, "/problems/signature-expired"]);
  });

  it("refuses a signature from beyond the skew in the future: 401 signature-from-future", async () => {
    const r = await send(
      await signed("GET", `/v1/contexts/${context.id}`, admin.jwk, actorKeyId(admin.id), undefined, {
        created: now() + 301,
      }),
    );
    expect([r.status, r.type]).toEqual([401, "/problems/signature-from-future"]);
    const within = await send(
      await signed("GET", `/v1/contexts/${context.id}`, admin.jwk, actorKeyId(admin.id), undefined, {
        created: now() + 60,
      }),
    );
    expect(within.status).toBe(200);
  });

  it("refuses a replayed nonce: 401 nonce-replayed, the first use succeeding", async () => {
    const request = await signed("POST", `/v1/contexts/${context.id}/runners`, admin.jwk, actorKeyId(admin.id), {
      pubkey: (await generateKeyPair()).x,
      runner_type: "python",
      local: true,
    });
    const replay = request.clone();
    expect((await send(request)).status).toBe(201);
    const r = await send(replay);
    expect([r.status, r.type]).toEqual([401, "/problems/nonce-replayed"]);
    expect((await admin.client.listRunners(context.id)).total).toBe(3);
  });

  it("refuses a tampered body: 401 digest-mismatch; with a recomputed digest, signature-invalid", async () => {
    const original = await signed("PATCH", `/v1/actors/${admin.id}`, admin.jwk, actorKeyId(admin.id), { address: [] });
    const tampered = new Request(original.url, {
      method: "PATCH",
      headers: original.headers,
      body: JSON.stringify({ address: [{ type: "mycelium", address: "evil" }] }),
    });
    const r = await send(tampered);
    expect([r.status, r.type]).toEqual([401, "/problems/digest-mismatch"]);

    const again = await signed("PATCH", `/v1/actors/${admin.id}`, admin.jwk, actorKeyId(admin.id), { address: [] });
    const evilBody = JSON.stringify({ address: [{ type: "mycelium", address: "evil" }] });
    const headers = new Headers(again.headers);
    const digest = new Uint8Array(await crypto.subtle.digest("SHA-256", new TextEncoder().encode(evilBody)));
    headers.set("content-digest", `sha-256=:${btoa(String.fromCharCode(...digest))}:`);
    const r2 = await send(new Request(again.url, { method: "PATCH", headers, body: evilBody }));
    expect([r2.status, r2.type]).toEqual([401, "/problems/signature-invalid"]);
    expect((await admin.client.loadActor(admin.id)).address).toEqual([]);
  });

  it("refuses a tampered path or query: 401 signature-invalid", async () => {
    const original = await signed("GET", `/v1/contexts/${context.id}/runners?limit=1`, admin.jwk, actorKeyId(admin.id));
    for (const url of [
      `${BASE}/v1/contexts/${otherContext.id}/runners?limit=1`,
      `${BASE}/v1/contexts/${context.id}/runners?limit=50`,
    ]) {
      const r = await send(new Request(url, { headers: original.headers }));
      expect([r.status, r.type]).toEqual([401, "/problems/signature-invalid"]);
    }
  });

  it("refuses an unknown key and a malformed signature", async () => {
    const unknown = await send(await signed("GET", `/v1/contexts/${context.id}`, admin.jwk, actorKeyId(999_999)));
    expect([unknown.status, unknown.type]).toEqual([401, "/problems/unknown-key"]);
    const nonsense = await send(await signed("GET", `/v1/contexts/${context.id}`, admin.jwk, "someone"));
    expect([nonsense.status, nonsense.type]).toEqual([401, "/problems/unknown-key"]);
    const malformed = await send(
      new Request(`${BASE}/v1/contexts/${context.id}`, {
        headers: { signature: "sig1=:!!:", "signature-input": "sig1=(" },
      }),
    );
    expect([malformed.status, malformed.type]).toEqual([401, "/problems/signature-malformed"]);
  });

  it("lets a bare key register its actor and nothing else", async () => {
    const jwk = await generateKeyPair();
    const r = await send(await signed("GET", `/v1/contexts/${context.id}`, jwk, bareKeyId(jwk.x)));
    expect([r.status, r.type]).toEqual([401, "/problems/unknown-key"]);
    const other = await generateKeyPair();
    const stolen = await send(await signed("POST", "/v1/actors", jwk, bareKeyId(jwk.x), { pubkey: other.x }));
    expect(stolen.status).toBe(403);
  });
});

describe("permissions", () => {
  it("refuses an actor in no list: 403 naming the lists that would do", async () => {
    const r = await send(await signed("GET", `/v1/contexts/${context.id}`, outsider.jwk, actorKeyId(outsider.id)));
    expect([r.status, r.type]).toEqual([403, "/problems/forbidden"]);
    expect(r.body.needed).toEqual(["admins", "readers", "executors"]);
  });

  it("lets readers and executors read, but not write", async () => {
    for (const party of [reader, executor]) {
      expect((await party.client.loadContext(context.id)).id).toBe(context.id);
      const write = await send(
        await signed(
          "PUT",
          `/v1/contexts/${context.id}/permissions/readers/${outsider.id}`,
          party.jwk,
          actorKeyId(party.id),
        ),
      );
      expect([write.status, write.type, write.body.needed]).toEqual([403, "/problems/forbidden", ["admins"]]);
      const remove = await send(
        await signed("DELETE", `/v1/contexts/${context.id}/runners/${runnerA.id}`, party.jwk, actorKeyId(party.id)),
      );
      expect(remove.status).toBe(403);
    }
  });

  it("resolves ids inside the context of the path: another context's runner is not found there", async () => {
    const foreign = await send(
      await signed(
        "GET",
        `/v1/contexts/${otherContext.id}/runners/${runnerA.id}`,
        outsider.jwk,
        actorKeyId(outsider.id),
      ),
    );
    expect([foreign.status, foreign.type]).toEqual([404, "/problems/not-found"]);
    const crossing = await send(
      await signed("GET", `/v1/contexts/${otherContext.id}/runners`, admin.jwk, actorKeyId(admin.id)),
    );
    expect(crossing.status).toBe(403);
  });

  it("lets a runner load itself but not another runner, nor do an admin's work", async () => {
    const self = await send(
      await signed(
        "GET",
        `/v1/contexts/${context.id}/runners/${runnerA.id}`,
        runnerAKey,
        runnerKeyId(context.id, runnerA.id),
      ),
    );
    expect(self.status).toBe(200);
    const other = await send(
      await signed(
        "GET",
        `/v1/contexts/${context.id}/runners/${runnerB.id}`,
        runnerAKey,
        runnerKeyId(context.id, runnerA.id),
      ),
    );
    expect([other.status, other.type]).toEqual([403, "/problems/forbidden"]);
    const admin = await send(
      await signed("POST", `/v1/contexts/${context.id}/runners`, runnerAKey, runnerKeyId(context.id, runnerA.id), {
        pubkey: runnerAKey.x,
        runner_type: "sh",
        local: true,
      }),
    );
    expect(admin.status).toBe(403);
  });

  it("refuses a runner signing with another runner's keyid: 401 signature-invalid", async () => {
    const r = await send(
      await signed(
        "GET",
        `/v1/contexts/${context.id}/runners/${runnerB.id}`,
        runnerAKey,
        runnerKeyId(context.id, runnerB.id),
      ),
    );
    expect([r.status, r.type]).toEqual([401, "/problems/signature-invalid"]);
  });

  it("grants and revokes atomically, and never removes the last admin", async () => {
    const granted = await admin.client.grant(context.id, "readers", outsider.id);
    expect(granted.readers).toContain(outsider.id);
    expect(
      (await admin.client.grant(context.id, "readers", outsider.id)).readers.filter((id) => id === outsider.id),
    ).toHaveLength(1);
    expect((await outsider.client.loadContext(context.id)).id).toBe(context.id);
    await admin.client.revoke(context.id, "readers", outsider.id);
    const r = await send(await signed("GET", `/v1/contexts/${context.id}`, outsider.jwk, actorKeyId(outsider.id)));
    expect(r.status).toBe(403);
    const last = await send(
      await signed(
        "DELETE",
        `/v1/contexts/${context.id}/permissions/admins/${admin.id}`,
        admin.jwk,
        actorKeyId(admin.id),
      ),
    );
    expect([last.status, last.type]).toEqual([409, "/problems/conflict"]);
    const missing = await send(
      await signed("PUT", `/v1/contexts/${context.id}/permissions/readers/999999`, admin.jwk, actorKeyId(admin.id)),
    );
    expect(missing.status).toBe(404);
  });

  it("replaces the lists, naming an unknown actor by its field", async () => {
    const r = await send(
      await signed("PUT", `/v1/contexts/${context.id}/permissions`, admin.jwk, actorKeyId(admin.id), {
        admins: [admin.id],
        readers: [reader.id, 888_888],
        executors: [executor.id],
      }),
    );
    expect([r.status, r.type, r.body.field]).toEqual([400, "/problems/invalid-input", "body.readers.1"]);
    const ok = await admin.client.setPermissions(context.id, {
      admins: [admin.id],
      readers: [reader.id],
      executors: [executor.id],
    });
    expect(ok.readers).toEqual([reader.id]);
  });

  it("deletes a context with everything in it (admins only)", async () => {
    const doomed = await admin.client.createContext();
    const key = await generateKeyPair();
    const runner = await admin.client.createRunner(doomed.id, { pubkey: key.x, runner_type: "sh", local: true });
    expect(
      (await send(await signed("DELETE", `/v1/contexts/${doomed.id}`, reader.jwk, actorKeyId(reader.id)))).status,
    ).toBe(403);
    await admin.client.deleteContext(doomed.id);
    const gone = await send(await signed("GET", `/v1/contexts/${doomed.id}`, admin.jwk, actorKeyId(admin.id)));
    expect([gone.status, gone.type]).toEqual([404, "/problems/not-found"]);
    expect(await keysUnder(w.redis, w.keys.namespace(doomed.id))).toEqual([]);
    const runnerCall = await send(
      await signed("GET", `/v1/contexts/${doomed.id}/runners/${runner.id}`, key, runnerKeyId(doomed.id, runner.id)),
    );
    expect(runnerCall.status).toBe(401);
  });
});

describe("deployment settings", () => {
  it("restricts registration to an allow-list", async () => {
    const listed = await generateKeyPair();
    const restricted = testWorker("auth-allow", { ACTOR_REGISTRATION: "allowlist", ACTOR_ALLOWLIST: listed.x });
    try {
      const unlisted = await generateKeyPair();
      const refused = await restricted.fetch(
        await signed("POST", "/v1/actors", unlisted, bareKeyId(unlisted.x), { pubkey: unlisted.x }),
      );
      expect(refused.status).toBe(403);
      expect((await restricted.anonymous.registerActor(listed)).pubkey).toBe(listed.x);
    } finally {
      await restricted.cleanup();
    }
  });

  it("demands an operator's countersignature when registration is operator-only", async () => {
    const operator = await generateKeyPair();
    const restricted = testWorker("auth-operator", { ACTOR_REGISTRATION: "operator", OPERATOR_PUBKEYS: operator.x });
    try {
      const jwk = await generateKeyPair();
      const refused = await failure(restricted.anonymous.registerActor(jwk));
      expect(refused).toMatchObject({ status: 403, code: "countersignature-required" });
      const impostor = await generateKeyPair();
      const forged = await failure(
        restricted.anonymous.registerActor(
          jwk,
          {},
          { keyid: bareKeyId(impostor.x), key: await importPrivateKey(impostor) },
        ),
      );
      expect(forged).toMatchObject({ status: 403 });
      const actor = await restricted.anonymous.registerActor(
        jwk,
        {},
        { keyid: bareKeyId(operator.x), key: await importPrivateKey(operator) },
      );
      expect(actor.pubkey).toBe(jwk.x);
    } finally {
      await restricted.cleanup();
    }
  });

  it("refuses plain-http addresses unless ALLOW_INSECURE_HTTP is on, naming the field", async () => {
    const strict = testWorker("auth-https", { ALLOW_INSECURE_HTTP: "false" });
    try {
      const jwk = await generateKeyPair();
      const res = await strict.fetch(
        await signed("POST", "/v1/actors", jwk, bareKeyId(jwk.x), {
          pubkey: jwk.x,
          address: [{ type: "https", url: "http://127.0.0.1:9000/inbox" }],
        }),
      );
      expect(res.status).toBe(400);
      expect(await res.json()).toMatchObject({ type: "/problems/invalid-input", field: "body.address.0.url" });
    } finally {
      await strict.cleanup();
    }
  });
});
