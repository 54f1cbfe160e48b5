import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { expectWellFormed, RUNS, useFuzzTarget } from "./fuzz-harness.js";

// Property-based fuzzing of every request body, path parameter and header: whatever arrives, the
// answer is never a 5xx, and every 4xx is a problem document (on /rpc, a JSON-RPC error carrying
// one); a 400 names a field. Signatures and signers are fuzzed in fuzz-signatures.test.ts.

const { w, ids, ROUTES, signedRequest } = useFuzzTarget("fuzz");

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
      (a: string) => `/v1/contexts/${ids.contextId}/flows/${a}/dag`,
      (a: string, b: string) => `/v1/contexts/${ids.contextId}/jobs/${a}/${b}`,
      (a: string, b: string) => `/v1/contexts/${ids.contextId}/messages/${a}/${b}`,
      (a: string) => `/v1/contexts/${ids.contextId}/deadletters/${a}`,
      (a: string) => `/v1/contexts/${ids.contextId}/flows?status=${a}&offset=${a}`,
      (a: string) => `/v1/contexts/${ids.contextId}/inbox?max=${a}&pop=${a}`,
      (a: string) => `/v1/contexts/${a}`,
      (a: string, b: string) => `/v1/contexts/${a}/runners/${b}`,
      (a: string, b: string) => `/v1/contexts/${ids.contextId}/permissions/${a}/${b}`,
      (a: string) => `/v1/contexts/${ids.contextId}/runners?offset=${a}&limit=${a}`,
      (a: string, b: string) => `/v1/contexts/${ids.contextId}/templates/${a}/versions/${b}`,
      (a: string) => `/v1/contexts/${ids.contextId}/templates/${a}`,
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
            `/v1/contexts/${ids.contextId}/flows`,
            JSON.stringify({ jobs: [{ script: "x", script_type: "sh" }] }),
            { headers },
          );
        } catch {
          return; // not a valid header value at all: no client could send it
        }
        await expectWellFormed(await w.fetch(request), `/v1/contexts/${ids.contextId}/flows`);
      }),
      { numRuns: RUNS },
    );
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
        `/v1/contexts/${ids.contextId}/flows`,
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
