import fc from "fast-check";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { actorKeyId, generateKeyPair, importPrivateKey, runnerKeyId, signRequest, type PrivateJwk } from "../../shared/auth/index.js";
import { BASE, testWorker } from "./harness.js";

// Property-based fuzzing of every request body, path parameter and signature header: whatever
// arrives, the answer is never a 5xx, and every 4xx is a problem document; a 400 names a field.

const w = testWorker("fuzz");
afterAll(() => w.cleanup());

/** Runs per property (21 properties' worth): 150 in CI, about 3,000 cases; `npm run fuzz` runs 480, about 10,000. */
const RUNS = Number(process.env.FUZZ_RUNS ?? 150);
let admin: { id: number; jwk: PrivateJwk };
let contextId: number;
let runnerId: number;
let runnerJwk: PrivateJwk;
let flowId: number;
let jobId: number;

beforeAll(async () => {
  const a = await w.newActor();
  admin = { id: a.actor.id, jwk: a.jwk };
  contextId = (await a.client.createContext()).id;
  runnerJwk = await generateKeyPair();
  runnerId = (await a.client.createRunner(contextId, { pubkey: runnerJwk.x, runner_type: "sh", local: true })).id;
  const flow = (await a.client.request("POST", `/v1/contexts/${contextId}/flows`, { start: true, jobs: [{ name: "f", script: "x", script_type: "sh" }] })) as { id: number; jobs: { id: number }[] };
  flowId = flow.id;
  jobId = flow.jobs[0]?.id ?? 1;
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
  /** Signed by the context's runner instead of the admin. */
  asRunner?: boolean;
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
  { name: "POST /v1/contexts/{contextId}/flows", method: "POST", path: () => `/v1/contexts/${contextId}/flows`, fields: ["id", "env_vars", "jobs", "start", "timeouts"] },
  { name: "POST /v1/contexts/{contextId}/jobs", method: "POST", path: () => `/v1/contexts/${contextId}/jobs`, fields: ["job", "start", "timeouts"] },
  { name: "POST /v1/contexts/{contextId}/messages", method: "POST", path: () => `/v1/contexts/${contextId}/messages`, fields: ["to", "message_type", "message_format_type", "subject", "message"] },
  { name: "POST …/flows/{flowId}/cancel", method: "POST", path: () => `/v1/contexts/${contextId}/flows/${flowId}/cancel`, fields: ["reason"] },
  { name: "POST …/runners/{runnerId}/lease", method: "POST", path: () => `/v1/contexts/${contextId}/runners/${runnerId}/lease`, fields: ["max"], asRunner: true },
  { name: "POST …/jobs/{jobId}/result", method: "POST", path: () => `/v1/contexts/${contextId}/flows/${flowId}/jobs/${jobId}/result`, fields: ["attempt", "status", "result", "error", "logs"], asRunner: true },
  { name: "POST …/jobs/{jobId}/logs", method: "POST", path: () => `/v1/contexts/${contextId}/flows/${flowId}/jobs/${jobId}/logs`, fields: ["attempt", "logs"], asRunner: true },
  { name: "POST …/jobs/{jobId}/heartbeat", method: "POST", path: () => `/v1/contexts/${contextId}/flows/${flowId}/jobs/${jobId}/heartbeat`, fields: ["attempt"], asRunner: true },
];

async function signedRequest(method: string, path: string, body?: string, options: { asRunner?: boolean; headers?: Record<string, string> } = {}): Promise<Request> {
  const headers = { ...(body === undefined ? {} : { "content-type": "application/json" }), ...options.headers };
  const request = new Request(`${BASE}${path}`, { method, headers, ...(body === undefined ? {} : { body }) });
  const signer = options.asRunner
    ? { keyid: runnerKeyId(contextId, runnerId), key: await importPrivateKey(runnerJwk) }
    : { keyid: actorKeyId(admin.id), key: await importPrivateKey(admin.jwk) };
  return signRequest(request, signer);
}

async function expectWellFormed(res: Response): Promise<void> {
  expect(res.status, `status ${res.status}`).toBeLessThan(500);
  if (res.status >= 400 && res.headers.get("content-type") !== "application/json") {
    expect(res.headers.get("content-type")).toBe("application/problem+json");
    const problem = (await res.json()) as { type: string; status: number; field?: string };
    expect(problem.status).toBe(res.status);
    expect(problem.type).toMatch(/^\/problems\//);
    if (problem.type === "/problems/invalid-input") expect(problem.field).toMatch(/^(body|param|query|params|header)/);
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
          await expectWellFormed(await w.fetch(await signedRequest(route.method, route.path(), body, route.asRunner ? { asRunner: true } : {})));
        }),
        { numRuns: RUNS },
      );
    },
  );

  it("never answers arbitrary path parameters with a 5xx", async () => {
    const segment = fc.oneof(fc.string({ maxLength: 12 }), fc.integer().map(String), fc.constantFrom("0", "-1", "1e3", "4294967296", "%2F", "admins", "..", "runners"));
    const templates = [
      (a: string) => `/v1/actors/${a}`,
      (a: string, b: string) => `/v1/contexts/${a}/flows/${b}`,
      (a: string) => `/v1/contexts/${contextId}/flows/${a}/dag`,
      (a: string, b: string) => `/v1/contexts/${contextId}/jobs/${a}/${b}`,
      (a: string, b: string) => `/v1/contexts/${contextId}/messages/${a}/${b}`,
      (a: string) => `/v1/contexts/${contextId}/deadletters/${a}`,
      (a: string) => `/v1/contexts/${contextId}/flows?status=${a}&offset=${a}`,
      (a: string) => `/v1/contexts/${contextId}/inbox?max=${a}&pop=${a}`,
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

  it("never answers arbitrary request headers with a 5xx", async () => {
    const value = fc.oneof(fc.string({ maxLength: 80 }), fc.constantFrom("", "text/plain", "application/json; charset=utf-16", "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", "00-zz"));
    const name = fc.constantFrom("idempotency-key", "content-type", "traceparent", "accept", "content-encoding");
    await fc.assert(
      fc.asyncProperty(fc.dictionary(name, value, { maxKeys: 3 }), async (headers) => {
        let request: Request;
        try {
          request = await signedRequest("POST", `/v1/contexts/${contextId}/flows`, JSON.stringify({ jobs: [{ script: "x", script_type: "sh" }] }), { headers });
        } catch {
          return; // not a valid header value at all: no client could send it
        }
        await expectWellFormed(await w.fetch(request));
      }),
      { numRuns: RUNS },
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
