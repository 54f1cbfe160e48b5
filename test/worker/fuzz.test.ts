import fc from "fast-check";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { actorKeyId, generateKeyPair, importPrivateKey, signRequest, type PrivateJwk } from "../../shared/auth/index.js";
import { BASE, testWorker } from "./harness.js";

// Property-based fuzzing of every request body, path parameter and signature header: whatever
// arrives, the answer is never a 5xx, and every 4xx is a problem document; a 400 names a field.

const w = testWorker("fuzz");
afterAll(() => w.cleanup());

const RUNS = 120;
let admin: { id: number; jwk: PrivateJwk };
let contextId: number;
let runnerId: number;

beforeAll(async () => {
  const a = await w.newActor();
  admin = { id: a.actor.id, jwk: a.jwk };
  contextId = (await a.client.createContext()).id;
  runnerId = (await a.client.createRunner(contextId, { pubkey: (await generateKeyPair()).x, runner_type: "sh", local: true })).id;
});

/** Any JSON value a client might send, weighted towards the awkward. */
const anyValue: fc.Arbitrary<unknown> = fc.oneof(
  fc.jsonValue(),
  fc.constantFrom(0, -1, 1.5, 2 ** 53, 4_294_967_296, "", "https://x.example", "http://127.0.0.1:1", "\u0000", "🎉", null, true, [], {}),
  fc.string(),
  fc.integer(),
);

/** Objects shaped like a route's body: some of its real fields with arbitrary values, plus noise. */
function shaped(fields: string[]): fc.Arbitrary<unknown> {
  return fc.oneof(
    fc.dictionary(fc.constantFrom(...fields, "extra"), anyValue, { maxKeys: fields.length + 1 }),
    fc.record(Object.fromEntries(fields.map((f) => [f, anyValue])), { requiredKeys: [] }),
    anyValue,
  );
}

interface Route {
  name: string;
  method: string;
  path: () => string;
  fields: string[];
}

const ROUTES: Route[] = [
  { name: "POST /v1/actors", method: "POST", path: () => "/v1/actors", fields: ["id", "pubkey", "address"] },
  { name: "PATCH /v1/actors/{actorId}", method: "PATCH", path: () => `/v1/actors/${admin.id}`, fields: ["address"] },
  { name: "PUT /v1/actors/{actorId}/key", method: "PUT", path: () => `/v1/actors/${admin.id}/key`, fields: ["pubkey"] },
  { name: "POST /v1/contexts", method: "POST", path: () => "/v1/contexts", fields: ["id", "admins", "readers", "executors"] },
  { name: "PUT /v1/contexts/{contextId}/permissions", method: "PUT", path: () => `/v1/contexts/${contextId}/permissions`, fields: ["admins", "readers", "executors"] },
  { name: "POST /v1/contexts/{contextId}/runners", method: "POST", path: () => `/v1/contexts/${contextId}/runners`, fields: ["id", "pubkey", "address", "topic", "local", "runner_type", "script_types", "concurrency"] },
  { name: "PATCH /v1/contexts/{contextId}/runners/{runnerId}", method: "PATCH", path: () => `/v1/contexts/${contextId}/runners/${runnerId}`, fields: ["pubkey", "address", "topic", "local", "script_types", "concurrency"] },
  { name: "POST /rpc", method: "POST", path: () => "/rpc", fields: ["jsonrpc", "id", "method", "params"] },
];

async function signedRequest(method: string, path: string, body?: string): Promise<Request> {
  const request = new Request(`${BASE}${path}`, { method, ...(body === undefined ? {} : { body }) });
  return signRequest(request, { keyid: actorKeyId(admin.id), key: await importPrivateKey(admin.jwk) });
}

async function expectWellFormed(res: Response): Promise<void> {
  expect(res.status, `status ${res.status}`).toBeLessThan(500);
  if (res.status >= 400 && res.headers.get("content-type") !== "application/json") {
    expect(res.headers.get("content-type")).toBe("application/problem+json");
    const problem = (await res.json()) as { type: string; status: number; field?: string };
    expect(problem.status).toBe(res.status);
    expect(problem.type).toMatch(/^\/problems\//);
    if (problem.type === "/problems/invalid-input") expect(problem.field).toMatch(/^(body|param|query|params)/);
  } else {
    await res.arrayBuffer();
  }
}

describe("fuzzing", () => {
  it.each(ROUTES.map((r) => [r.name, r] as const))(
    "never answers a signed body with a 5xx: %s",
    async (_name, route) => {
      await fc.assert(
        fc.asyncProperty(fc.oneof(shaped(route.fields).map((v) => JSON.stringify(v)), fc.string()), async (body) => {
          await expectWellFormed(await w.fetch(await signedRequest(route.method, route.path(), body)));
        }),
        { numRuns: RUNS },
      );
    },
  );

  it("never answers arbitrary path parameters with a 5xx", async () => {
    const segment = fc.oneof(fc.string({ maxLength: 12 }), fc.integer().map(String), fc.constantFrom("0", "-1", "1e3", "4294967296", "%2F", "admins", "..", "runners"));
    const templates = [
      (a: string) => `/v1/actors/${a}`,
      (a: string) => `/v1/contexts/${a}`,
      (a: string, b: string) => `/v1/contexts/${a}/runners/${b}`,
      (a: string, b: string) => `/v1/contexts/${contextId}/permissions/${a}/${b}`,
      (a: string) => `/v1/contexts/${contextId}/runners?offset=${a}&limit=${a}`,
    ];
    await fc.assert(
      fc.asyncProperty(fc.constantFrom(...templates.keys()), segment, segment, fc.constantFrom("GET", "PUT", "DELETE", "PATCH"), async (t, a, b, method) => {
        const path = (templates[t] as (a: string, b: string) => string)(encodeURIComponent(a), encodeURIComponent(b));
        await expectWellFormed(await w.fetch(await signedRequest(method, path, method === "PATCH" ? "{}" : undefined)));
      }),
      { numRuns: RUNS * 2 },
    );
  });

  it("answers arbitrary signature headers with 401, never a 5xx", async () => {
    const header = fc.oneof(
      fc.string(),
      fc.constant('sig1=("@method" "@target-uri");created=1;keyid="actor:1";nonce="aaaaaaaaaaaaaaaaaaaa"'),
      fc.tuple(fc.string(), fc.integer(), fc.string()).map(([k, c, n]) => `sig1=("@method");created=${c};keyid=${JSON.stringify(k)};nonce=${JSON.stringify(n)}`),
    );
    const signature = fc.oneof(fc.string(), fc.base64String().map((b) => `sig1=:${b}:`));
    await fc.assert(
      fc.asyncProperty(header, signature, fc.option(fc.string()), async (input, sig, digest) => {
        const headers = new Headers();
        try {
          headers.set("signature-input", input);
          headers.set("signature", sig);
          if (digest !== null) headers.set("content-digest", digest);
        } catch {
          return; // not a valid header value at all: no client could send it
        }
        const res = await w.fetch(new Request(`${BASE}/v1/contexts/${contextId}`, { method: "POST", headers, body: "{}" }));
        expect(res.status).toBe(401);
        await expectWellFormed(res);
      }),
      { numRuns: RUNS * 2 },
    );
  });
});
