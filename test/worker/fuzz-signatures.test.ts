import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { actorKeyId, generateKeyPair, runnerKeyId } from "../../shared/auth/index.js";
import { expectWellFormed, RUNS, useFuzzTarget } from "./fuzz-harness.js";
import { BASE, signed } from "./harness.js";

// Property-based fuzzing of signature headers and signers: an arbitrary or forged signature is a
// 401, a webhook signed by anyone but a runner a 403, and whoever signs, the answer is never a
// 5xx. Bodies, paths and headers are fuzzed in fuzz.test.ts.

const { w, ids, ROUTES, signedRequest } = useFuzzTarget("fuzz-signatures");

describe("fuzzing", () => {
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
          new Request(`${BASE}/v1/contexts/${ids.contextId}`, { method: "POST", headers, body: "{}" }),
        );
        expect(res.status).toBe(401);
        await expectWellFormed(res, `/v1/contexts/${ids.contextId}`);
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
      async () => ({ jwk: ids.admin.jwk, keyid: actorKeyId(ids.admin.id) }),
      async () => ({ jwk: ids.runnerJwk, keyid: runnerKeyId(ids.contextId, ids.runnerId) }),
      async () => ({ jwk: ids.admin.jwk, keyid: `key:${ids.admin.jwk.x}` }),
      async () => {
        const jwk = await generateKeyPair();
        return { jwk, keyid: `key:${jwk.x}` };
      },
    ];
    const webhooks = ["ack", "started", "heartbeat", "logs", "result"].flatMap((event) => [
      {
        name: `POST …/flows/{f}/jobs/{j}/${event}`,
        method: "POST",
        path: () => `/v1/contexts/${ids.contextId}/flows/${ids.flowId}/jobs/${ids.jobId}/${event}`,
        fields: ["attempt"],
      },
      {
        name: `POST …/jobs/{caller}/{j}/${event}`,
        method: "POST",
        path: () => `/v1/contexts/${ids.contextId}/jobs/${ids.admin.id}/${ids.jobId}/${event}`,
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
});
