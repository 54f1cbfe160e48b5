import fc from "fast-check";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { actorKeyId, generateKeyPair, runnerKeyId, type PrivateJwk } from "../../shared/auth/index.js";
import { BASE, signed, testWorker } from "./harness.js";

// Property-based fuzzing of every request body, path parameter and signature header: whatever
// arrives, the answer is never a 5xx, and every 4xx is a problem document (on /rpc, a JSON-RPC
// error carrying one); a 400 names a field.

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
  const flow = await a.client.submitFlow(contextId, {
    start: true,
    jobs: [{ name: "f", script: "x", script_type: "sh" }],
  });
  flowId = flow.id;
  jobId = flow.jobs[0]?.id as number;
  expect(jobId).toBeGreaterThan(0);
});

/** Any JSON value a client might send, weighted towards the awkward. */
const anyValue: fc.Arbitrary<unknown> = fc.oneof(
  fc.jsonValue(),
  fc.constantFrom(
    0,
    -1,
    1.5,
    2 ** 53,
    4_294_967_296,
    "",
    "https://x.example",
    "http://127.0.0.1:1",
    "\u0000",
    "🎉",
    null,
    true,
    [],
    {},
  ),
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
  {
    name: "POST /v1/contexts",
    method: "POST",
    path: () => "/v1/contexts",
    fields: ["id", "admins", "readers", "executors"],
  },
  {
    name: "PUT /v1/contexts/{contextId}/permissions",
    method: "PUT",
    path: () => `/v1/contexts/${contextId}/permissions`,
    fields: ["admins", "readers", "executors"],
  },
  {
    name: "POST /v1/contexts/{contextId}/runners",
    method: "POST",
    path: () => `/v1/contexts/${contextId}/runners`,
    fields: ["id", "pubkey", "address", "topic", "local", "runner_type", "script_types", "concurrency"],
  },
  {
    name: "PATCH /v1/contexts/{contextId}/runners/{runnerId}",
    method: "PATCH",
    path: () => `/v1/contexts/${contextId}/runners/${runnerId}`,
    fields: ["pubkey", "address", "topic", "local", "script_types", "concurrency"],
  },
  { name: "POST /rpc", method: "POST", path: () => "/rpc", fields: ["jsonrpc", "id", "method", "params"] },
  {
    name: "POST /v1/contexts/{contextId}/flows",
    method: "POST",
    path: () => `/v1/contexts/${contextId}/flows`,
    fields: ["id", "env_vars", "jobs", "start", "timeouts"],
  },
  {
    name: "POST /v1/contexts/{contextId}/jobs",
    method: "POST",
    path: () => `/v1/contexts/${contextId}/jobs`,
    fields: ["job", "start", "timeouts"],
  },
  {
    name: "POST /v1/contexts/{contextId}/messages",
    method: "POST",
    path: () => `/v1/contexts/${contextId}/messages`,
    fields: ["to", "message_type", "message_format_type", "subject", "message"],
  },
  {
    name: "POST …/flows/{flowId}/cancel",
    method: "POST",
    path: () => `/v1/contexts/${contextId}/flows/${flowId}/cancel`,
    fields: ["reason"],
  },
  {
    name: "POST …/runners/{runnerId}/lease",
    method: "POST",
    path: () => `/v1/contexts/${contextId}/runners/${runnerId}/lease`,
    fields: ["max"],
    asRunner: true,
  },
  {
    name: "POST …/jobs/{jobId}/result",
    method: "POST",
    path: () => `/v1/contexts/${contextId}/flows/${flowId}/jobs/${jobId}/result`,
    fields: ["attempt", "status", "result", "error", "logs"],
    asRunner: true,
  },
  {
    name: "POST …/jobs/{jobId}/logs",
    method: "POST",
    path: () => `/v1/contexts/${contextId}/flows/${flowId}/jobs/${jobId}/logs`,
    fields: ["attempt", "logs"],
    asRunner: true,
  },
  {
    name: "POST …/jobs/{jobId}/heartbeat",
    method: "POST",
    path: () => `/v1/contexts/${contextId}/flows/${flowId}/jobs/${jobId}/heartbeat`,
    fields: ["attempt"],
    asRunner: true,
  },
];

/** A request with `body` as it is (never re-encoded), signed by the admin or the context's runner. */
async function signedRequest(
  method: string,
  path: string,
  body?: string,
  options: { asRunner?: boolean; headers?: Record<string, string> } = {},
): Promise<Request> {
  const [jwk, keyid] = options.asRunner
    ? [runnerJwk, runnerKeyId(contextId, runnerId)]
    : [admin.jwk, actorKeyId(admin.id)];
  return signed(method, path, jwk, keyid, undefined, {
    ...(body === undefined ? {} : { raw: body }),
    ...(options.headers ? { headers: options.headers } : {}),
  });
}

interface Problem {
  type: string;
  status: number;
  field?: string;
}

/** What every problem document holds; a 400 for invalid input names the field at fault. */
function expectProblem(problem: Problem, status: number): void {
  expect(problem.status).toBe(status);
  expect(problem.type).toMatch(/^\/problems\//);
  if (problem.type === "/problems/invalid-input") expect(problem.field).toMatch(/^(body|param|query|params|header)/);
}

/**
 * Never a 5xx; a 4xx is a problem document. /rpc answers JSON-RPC instead: there a 4xx is a
 * JSON-RPC error whose `data` is the problem document, and no error, whatever the HTTP status,
 * carries a 5xx problem.
 */
async function expectWellFormed(res: Response, path: string): Promise<void> {
  expect(res.status, `status ${res.status}`).toBeLessThan(500);
  if (new URL(path, BASE).pathname === "/rpc") {
    await expectRpcWellFormed(res);
    return;
  }
  if (res.status < 400) {
    await res.arrayBuffer();
    return;
  }
  expect(res.headers.get("content-type")).toBe("application/problem+json");
  expectProblem((await res.json()) as Problem, res.status);
}

interface RpcAnswer {
  jsonrpc?: unknown;
  result?: unknown;
  error?: { code?: unknown; message?: unknown; data?: Problem };
}

async function expectRpcWellFormed(res: Response): Promise<void> {
  if (res.status === 204) return; // notifications only: nothing to answer
  expect(res.headers.get("content-type")).toMatch(/^application\/json/);
  const body = (await res.json()) as RpcAnswer | RpcAnswer[];
  const answers = Array.isArray(body) ? body : [body];
  if (res.status >= 400) {
    expect(answers).toHaveLength(1);
    expect(answers[0]?.error?.data, JSON.stringify(body)).toBeDefined();
    expectProblem(answers[0]?.error?.data as Problem, res.status);
  }
  for (const answer of answers) {
    expect(answer.jsonrpc).toBe("2.0");
    if (answer.error === undefined) continue;
    expect(answer.error.code).toEqual(expect.any(Number));
    expect(answer.error.message).toEqual(expect.any(String));
    if (answer.error.data !== undefined) {
      expect(answer.error.data.status, JSON.stringify(answer.error)).toBeLessThan(500);
      expectProblem(answer.error.data, answer.error.data.status);
    }
  }
}

describe("fuzzing", () => {
  it.each(ROUTES.map((r) => [r.name, r] as const))(
    "never answers a signed body with a 5xx: %s",
    async (_name, route) => {
      await fc.assert(
        fc.asyncProperty(
          fc.oneof(
            shaped(route.fields).map((v) => JSON.stringify(v)),
            fc.string(),
          ),
          async (body) => {
            await expectWellFormed(
              await w.fetch(
                await signedRequest(route.method, route.path(), body, route.asRunner ? { asRunner: true } : {}),
              ),
              route.path(),
            );
          },
        ),
        { numRuns: RUNS },
      );
    },
  );

  it("never answers arbitrary path parameters with a 5xx", async () => {
    const segment = fc.oneof(
      fc.string({ maxLength: 12 }),
      fc.integer().map(String),
      fc.constantFrom("0", "-1", "1e3", "4294967296", "%2F", "admins", "..", "runners"),
    );
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
      fc.asyncProperty(
        fc.constantFrom(...templates.keys()),
        segment,
        segment,
        fc.constantFrom("GET", "PUT", "DELETE", "PATCH"),
        async (t, a, b, method) => {
          const path = (templates[t] as (a: string, b: string) => string)(encodeURIComponent(a), encodeURIComponent(b));
          await expectWellFormed(
            await w.fetch(await signedRequest(method, path, method === "PATCH" ? "{}" : undefined)),
            path,
          );
        },
      ),
      { numRuns: RUNS * 2 },
    );
  });

  it("never answers arbitrary request headers with a 5xx", async () => {
    const value = fc.oneof(
      fc.string({ maxLength: 80 }),
      fc.constantFrom(
        "",
        "text/plain",
        "application/json; charset=utf-16",
        "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
        "00-zz",
      ),
    );
    const name = fc.constantFrom("idempotency-key", "content-type", "traceparent", "accept", "content-encoding");
    await fc.assert(
      fc.asyncProperty(fc.dictionary(name, value, { maxKeys: 3 }), async (headers) => {
        let request: Request;
        try {
          request = await signedRequest(
            "POST",
            `/v1/contexts/${contextId}/flows`,
            JSON.stringify({ jobs: [{ script: "x", script_type: "sh" }] }),
            { headers },
          );
        } catch {
          return; // not a valid header value at all: no client could send it
        }
        await expectWellFormed(await w.fetch(request), `/v1/contexts/${contextId}/flows`);
      }),
      { numRuns: RUNS },
    );
  });

  it("answers arbitrary signature headers with 401, never a 5xx", async () => {
    const header = fc.oneof(
      fc.string(),
      fc.constant('sig1=("@method" "@target-uri");created=1;keyid="actor:1";nonce="aaaaaaaaaaaaaaaaaaaa"'),
      fc
        .tuple(fc.string(), fc.integer(), fc.string())
        .map(([k, c, n]) => `sig1=("@method");created=${c};keyid=${JSON.stringify(k)};nonce=${JSON.stringify(n)}`),
    );
    const signature = fc.oneof(
      fc.string(),
      fc.base64String().map((b) => `sig1=:${b}:`),
    );
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
        const res = await w.fetch(
          new Request(`${BASE}/v1/contexts/${contextId}`, { method: "POST", headers, body: "{}" }),
        );
        expect(res.status).toBe(401);
        await expectWellFormed(res, `/v1/contexts/${contextId}`);
      }),
      { numRuns: RUNS * 2 },
    );
  });

  it("answers a well-formed signature carrying random bytes with 401, never a 5xx", async () => {
    const bytes = fc.uint8Array({ minLength: 0, maxLength: 200 });
    await fc.assert(
      fc.asyncProperty(fc.constantFrom(...ROUTES), bytes, async (route, raw) => {
        const request = await signedRequest(route.method, route.path(), "{}", route.asRunner ? { asRunner: true } : {});
        const headers = new Headers(request.headers);
        headers.set("signature", `sig1=:${btoa(String.fromCharCode(...raw))}:`);
        const res = await w.fetch(new Request(request.url, { method: request.method, headers, body: "{}" }));
        expect(res.status, `${route.name} with ${raw.length} signature bytes`).toBe(401);
        await expectWellFormed(res, route.path());
      }),
      { numRuns: RUNS },
    );
  });

  it("answers every kind of signer on every route without a 5xx (a runner webhook signed by an actor is a 403)", async () => {
    const signers = [
      async () => ({ jwk: admin.jwk, keyid: actorKeyId(admin.id) }),
      async () => ({ jwk: runnerJwk, keyid: runnerKeyId(contextId, runnerId) }),
      async () => ({ jwk: admin.jwk, keyid: `key:${admin.jwk.x}` }),
      async () => {
        const jwk = await generateKeyPair();
        return { jwk, keyid: `key:${jwk.x}` };
      },
    ];
    const webhooks = ["ack", "started", "heartbeat", "logs", "result"].flatMap((event) => [
      {
        name: `POST …/flows/{f}/jobs/{j}/${event}`,
        method: "POST",
        path: () => `/v1/contexts/${contextId}/flows/${flowId}/jobs/${jobId}/${event}`,
        fields: ["attempt"],
      },
      {
        name: `POST …/jobs/{caller}/{j}/${event}`,
        method: "POST",
        path: () => `/v1/contexts/${contextId}/jobs/${admin.id}/${jobId}/${event}`,
        fields: ["attempt"],
      },
    ]);
    for (const route of [...ROUTES, ...webhooks]) {
      for (const signer of signers) {
        const { jwk, keyid } = await signer();
        const res = await w.fetch(await signed(route.method, route.path(), jwk, keyid, { attempt: 1 }));
        await expectWellFormed(res, route.path());
        if (route.name.includes("/jobs/") && !keyid.startsWith("runner:") && res.status !== 401)
          expect(res.status, `${route.name} as ${keyid}`).toBe(403);
      }
    }
  });

  it("answers oversized headers with 431 (or 401 for an oversized signature), never a 5xx", async () => {
    const big = (n: number) => "A".repeat(n);
    const cases: Record<string, string>[] = [
      { signature: `sig1=:${big(64 * 1024)}:` },
      { "signature-input": `sig1=("@method");keyid="${big(64 * 1024)}"` },
      { "x-padding": big(64 * 1024) },
      { "idempotency-key": big(20_000) },
      { traceparent: big(40_000) },
    ];
    for (const extra of cases) {
      const request = await signedRequest(
        "POST",
        `/v1/contexts/${contextId}/flows`,
        JSON.stringify({ jobs: [{ script: "x", script_type: "sh" }] }),
      );
      const headers = new Headers(request.headers);
      for (const [name, value] of Object.entries(extra)) headers.set(name, value);
      const res = await w.fetch(
        new Request(request.url, {
          method: "POST",
          headers,
          body: JSON.stringify({ jobs: [{ script: "x", script_type: "sh" }] }),
        }),
      );
      expect([401, 431], `${Object.keys(extra)[0]}: ${res.status}`).toContain(res.status);
      await expectWellFormed(res, "/v1/contexts");
    }
  });
});
