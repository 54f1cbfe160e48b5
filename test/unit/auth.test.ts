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
