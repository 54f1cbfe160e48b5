import { appendSignature, createSignature, webcrypto } from "http-message-sig";
import { describe, expect, it } from "vitest";
import type { AuthError } from "../../shared/auth/index.js";
import {
  checkContentDigest,
  contentDigest,
  decide,
  generateKeyPair,
  importPrivateKey,
  importPublicKey,
  keyThumbprint,
  parseKeyId,
  signedRequest,
  signRequest,
  verifyRequest,
} from "../../shared/auth/index.js";

const enc = (s: string) => new TextEncoder().encode(s) as Uint8Array<ArrayBuffer>;

describe("content digests (RFC 9530)", () => {
  it("computes sha-256 and checks a body against it", async () => {
    const header = await contentDigest(enc("{}"));
    expect(header).toBe("sha-256=:RBNvo1WzZ4oRRq0W9+hknpT7T8If536DEMBg9hyq/4o=:");
    expect(await checkContentDigest(header, enc("{}"))).toBe("ok");
    expect(await checkContentDigest(header, enc("{ }"))).toBe("mismatch");
    expect(await checkContentDigest(null, enc("{}"))).toBe("missing");
    expect(await checkContentDigest("sha-256=nope", enc("{}"))).toBe("malformed");
  });
});

describe("signing and verifying (RFC 9421, Ed25519) on Node", () => {
  it("round-trips, and names each failure", async () => {
    const jwk = await generateKeyPair();
    const other = await generateKeyPair();
    const signer = { keyid: "actor:1", key: await importPrivateKey(jwk) };
    const resolveKey = async (keyid: string) => (keyid === "actor:1" ? importPublicKey(jwk.x) : null);
    const now = Math.floor(Date.now() / 1000);
    const body = enc('{"a":1}');
    const request = await signRequest(new Request("https://c.example/v1/x?y=1", { method: "POST", body }), signer);
    const verify = (r: Request, b = body, at = now) =>
      verifyRequest(r, { body: b, now: at, skewSeconds: 300, resolveKey });

    expect(await verify(request.clone())).toMatchObject({ keyid: "actor:1", created: expect.any(Number) });
    const code = (p: Promise<unknown>) =>
      p.then(
        () => "ok",
        (e: AuthError) => e.code,
      );
    expect(await code(verify(request.clone(), enc('{"a":2}')))).toBe("digest-mismatch");
    expect(await code(verify(request.clone(), body, now + 1000))).toBe("signature-expired");
    expect(await code(verify(request.clone(), body, now - 1000))).toBe("signature-from-future");
    expect(
      await code(verify(new Request("https://c.example/v1/x?y=2", { method: "POST", headers: request.headers }), body)),
    ).toBe("signature-invalid");
    const forged = await signRequest(new Request("https://c.example/v1/x", { method: "GET" }), {
      keyid: "actor:1",
      key: await importPrivateKey(other),
    });
    expect(await code(verifyRequest(forged, { body: enc(""), now, skewSeconds: 300, resolveKey }))).toBe(
      "signature-invalid",
    );
    const unknown = await signRequest(new Request("https://c.example/v1/x"), {
      keyid: "actor:2",
      key: await importPrivateKey(jwk),
    });
    expect(await code(verifyRequest(unknown, { body: enc(""), now, skewSeconds: 300, resolveKey }))).toBe(
      "unknown-key",
    );
    expect(
      await code(
        verifyRequest(new Request("https://c.example/"), { body: enc(""), now, skewSeconds: 300, resolveKey }),
      ),
    ).toBe("signature-missing");
  });

  it("writes a first signature byte for byte as the RFC 9421 library would, and a second one through it", async () => {
    const jwk = await generateKeyPair();
    const key = await importPrivateKey(jwk);
    const fixed = { created: 1_800_000_000, nonce: 'n-0\\"q' };
    const cases = [
      new Request("https://r.example/deliver?x=1&y=%20", { method: "POST", body: enc('{"job":1}') }),
      new Request("https://r.example/v1/lease", { method: "GET" }),
    ];
    for (const unsigned of cases) {
      const ours = await signRequest(unsigned.clone(), { keyid: 'runner:3:"7"', key }, fixed);
      // The library's own way, from the same headers: Ed25519 signatures are deterministic.
      const headers = new Headers(unsigned.headers);
      const components = ["@method", "@target-uri"];
      const body = new Uint8Array(await unsigned.clone().arrayBuffer());
      if (body.length > 0) {
        headers.set("content-digest", await contentDigest(body));
        components.push("content-digest");
      }
      const theirs = appendSignature(
        headers,
        await createSignature(
          new Request(unsigned.url, { method: unsigned.method, headers, ...(body.length > 0 ? { body } : {}) }),
          {
            label: "sig1",
            components,
            parameters: { created: fixed.created, keyid: 'runner:3:"7"', nonce: fixed.nonce, alg: "ed25519" },
            signer: webcrypto.signer(key),
          },
        ),
      );
      for (const name of ["signature-input", "signature", "content-digest"])
        expect(ours.headers.get(name), name).toBe(theirs.get(name));
    }
    // A second label goes through the library, beside the first.
    const resolveKey = async () => importPublicKey(jwk.x);
    const body = enc("{}");
    const first = await signRequest(new Request("https://c.example/v1/y", { method: "POST", body }), {
      keyid: "actor:1",
      key,
    });
    const both = await signRequest(first, { keyid: "actor:2", key }, { label: "cosign" });
    expect(both.headers.get("signature-input")).toMatch(/^sig1=\(.*, cosign=\(/);
    const now = Math.floor(Date.now() / 1000);
    expect(await verifyRequest(both, { body, now, skewSeconds: 300, resolveKey })).toMatchObject({ keyid: "actor:1" });
  });

  it("signs a request made from its parts as it signs the same Request", async () => {
    const key = await importPrivateKey(await generateKeyPair());
    const signer = { keyid: "coordinator", key };
    const fixed = { created: 1_800_000_000, nonce: "n1" };
    const url = "HTTP://Runner.Example:80/deliver/../jobs?a=b c";
    const parts = { method: "POST", headers: { "content-type": "application/json", "x-a": "1" }, body: '{"job":1}' };
    const fromParts = await signedRequest(url, parts, signer, fixed);
    const fromRequest = await signRequest(new Request(url, parts), signer, fixed);
    expect(fromParts.url).toBe(fromRequest.url);
    expect([...fromParts.headers]).toEqual([...fromRequest.headers]);
    expect(await fromParts.text()).toBe(await fromRequest.text());
  });

  it("publishes RFC 7638 thumbprints as key ids", async () => {
    // RFC 8037 appendix A.3: the thumbprint of its example Ed25519 key.
    expect(await keyThumbprint("11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo")).toBe(
      "kPrK_qmxVWaYVA9wwBF6Iuo3vVzz7TxHCTwXBygrS4k",
    );
  });
});

describe("keyids and permissions", () => {
  it("parses the three keyid forms and nothing else", () => {
    expect(parseKeyId("actor:12")).toEqual({ kind: "actor", id: 12 });
    expect(parseKeyId("runner:7:3")).toEqual({ kind: "runner", contextId: 7, id: 3 });
    expect(parseKeyId("key:11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo")).toMatchObject({ kind: "key" });
    for (const bad of ["actor:0", "actor:01", "actor:1:2", "runner:7", "key:short", "12", "", "admin:1"])
      expect(parseKeyId(bad)).toBeNull();
  });

  it("decides access by list, naming the lists that would allow it", () => {
    const ctx = { admins: [1], readers: [2], executors: [3] };
    expect(decide(ctx, 1, "admin")).toEqual({ allowed: true });
    expect(decide(ctx, 2, "admin")).toEqual({ allowed: false, needed: ["admins"] });
    expect(decide(ctx, 3, "read")).toEqual({ allowed: true });
    expect(decide(ctx, 2, "execute")).toEqual({ allowed: false, needed: ["admins", "executors"] });
    expect(decide(ctx, 4, "read")).toEqual({ allowed: false, needed: ["admins", "readers", "executors"] });
  });
});
