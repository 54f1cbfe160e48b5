import { describe, expect, it } from "vitest";
import {
  AuthError,
  generateKeyPair,
  importPrivateKey,
  importPublicKey,
  signRequest,
  verifyRequest,
} from "../../shared/auth/index.js";
import { readFirstSignature } from "../../shared/auth/verify-first.js";
import { libraryReading } from "../support/signatures.js";

// A signature in the form this project's signer writes is read without the RFC 9421 library
// (shared/auth/verify-first.ts). These hold that reading to the library's: the same signature
// base for what it reads, the same verdict on every request, tampered or not, and the library
// for every other form.

const enc = (s: string) => new TextEncoder().encode(s) as Uint8Array<ArrayBuffer>;
const now = Math.floor(Date.now() / 1000);

const jwk = await generateKeyPair();
const privateKey = await importPrivateKey(jwk);
const publicKey = await importPublicKey(jwk.x);
const other = await importPublicKey((await generateKeyPair()).x);

/** The signature base the library builds for `label`, and its verdict, with `key`. */
const library = (request: Request, key: CryptoKey, body: Uint8Array, label = "sig1") =>
  libraryReading(
    request,
    key,
    {
      requiredComponents: body.length > 0 ? ["@method", "@target-uri", "content-digest"] : ["@method", "@target-uri"],
      requiredParameters: ["created", "keyid", "nonce"],
      now,
    },
    label,
  );

/** verifyRequest's verdict (the fast reading where it applies): "ok" or the failure's code. */
async function ours(request: Request, key: CryptoKey, body: Uint8Array<ArrayBuffer>): Promise<string> {
  return verifyRequest(request, { body, now, skewSeconds: 300, resolveKey: async () => key }).then(
    () => "ok",
    (error: unknown) => {
      if (error instanceof AuthError) return error.code;
      throw error;
    },
  );
}

const signed = (url: string, method: string, body: string, keyid = "actor:12") =>
  signRequest(
    new Request(url, { method, ...(body ? { body: enc(body) } : {}), headers: { "content-type": "application/json" } }),
    { keyid, key: privateKey },
  );

const cases: [string, string, string, string?][] = [
  ["http://127.0.0.1:8787/v1/contexts/1/flows", "POST", '{"start":true,"jobs":[]}'],
  ["https://c.example/v1/contexts/1/flows/2?explain=true&a=%20b", "GET", ""],
  [
    "https://runner.example:8443/deliver",
    "POST",
    '{"job":1}',
    "coordinator:kPrK_qmxVWaYVA9wwBF6Iuo3vVzz7TxHCTwXBygrS4k",
  ],
  ["https://c.example/v1/contexts/7/runners/3/results", "POST", "[]", "runner:7:3"],
  ["http://[::1]:9/x", "DELETE", ""],
];

describe("reading a first signature without the RFC 9421 library", () => {
  it("builds the library's signature base, byte for byte, for what this project's signer writes", async () => {
    for (const [url, method, body, keyid] of cases) {
      const request = await signed(url, method, body, keyid);
      const first = readFirstSignature(request, "sig1", body.length > 0);
      expect(first, url).not.toBeNull();
      const theirs = await library(request, publicKey, enc(body));
      expect(theirs.valid, url).toBe(true);
      expect(new TextDecoder().decode(first?.base), url).toBe(new TextDecoder().decode(theirs.base));
      expect(await ours(request, publicKey, enc(body)), url).toBe("ok");
    }
  });

  it("agrees with the library on every tampered request, and on another key", async () => {
    for (const [url, method, body, keyid] of cases) {
      const request = await signed(url, method, body, keyid);
      const input = request.headers.get("signature-input") as string;
      const signature = request.headers.get("signature") as string;
      const flipped = signature.replace(/:(.)/, (_, c: string) => `:${c === "A" ? "B" : "A"}`);
      const variants: [string, Request][] = [
        ["another key", request],
        ["method", new Request(url, { method: method === "GET" ? "HEAD" : "PUT", headers: request.headers })],
        ["target", new Request(`${url}${url.includes("?") ? "&" : "?"}z=1`, { method, headers: request.headers })],
        ["signature bytes", withHeaders(request, { signature: flipped })],
        [
          "created",
          withHeaders(request, {
            "signature-input": input.replace(/created=(\d+)/, (_, n: string) => `created=${Number(n) - 1}`),
          }),
        ],
        ["nonce", withHeaders(request, { "signature-input": input.replace(/nonce="(.)/, 'nonce="Z$1') })],
        ["keyid", withHeaders(request, { "signature-input": input.replace(/keyid="/, 'keyid="x') })],
      ];
      if (body) {
        const digest = "sha-256=:RBNvo1WzZ4oRRq0W9+hknpT7T8If536DEMBg9hyq/4o=:";
        variants.push(["digest", withHeaders(request, { "content-digest": digest })]);
      }
      for (const [what, variant] of variants) {
        const key = what === "another key" ? other : publicKey;
        const theirs = await library(variant.clone(), key, enc(body));
        const verdict = await ours(variant.clone(), key, enc(body));
        expect(theirs.valid, `${url}: ${what}`).toBe(false);
        expect(verdict, `${url}: ${what}`).not.toBe("ok");
      }
    }
  });

  it("leaves every other form to the library, which still verifies it", async () => {
    const request = await signed(cases[0]![0], "POST", '{"a":1}');
    const input = request.headers.get("signature-input") as string;
    const body = enc('{"a":1}');
    // Not as the signer wrote them: the library reads each (some it serializes back to what was
    // signed, and accepts), and verifyRequest's verdict is its verdict.
    const forms: Record<string, Record<string, string>> = {
      "created with a leading zero": { "signature-input": input.replace("created=", "created=0") },
      "parameters in another order": {
        "signature-input": input.replace(/;keyid=("[^"]*");nonce=("[^"]*")/, ";nonce=$2;keyid=$1"),
      },
      "a second member": { "signature-input": `${input}, sig2=("@method");created=1` },
      "whitespace inside": { "signature-input": input.replace('" "', '"  "') },
    };
    for (const [what, headers] of Object.entries(forms)) {
      const variant = withHeaders(request, headers);
      expect(readFirstSignature(variant, "sig1", true), what).toBeNull();
      const verdict = await ours(variant.clone(), publicKey, body);
      expect(verdict === "ok", `${what}: ${verdict}`).toBe((await library(variant.clone(), publicKey, body)).valid);
    }
    // A keyid an sf-string has to escape: signed and verified through the library.
    const escaped = await signed(cases[0]![0], "POST", '{"a":1}', 'runner:3:"7"');
    expect(readFirstSignature(escaped, "sig1", true)).toBeNull();
    expect(await ours(escaped, publicKey, body)).toBe("ok");
    // Without content-digest covered, a request with a body is the library's to refuse.
    const bare = await signed("https://c.example/v1/x", "GET", "");
    const withBody = new Request("https://c.example/v1/x", { method: "POST", headers: bare.headers, body });
    expect(readFirstSignature(withBody, "sig1", true)).toBeNull();
  });
});

/** `request` (its body not read: verifyRequest is given the body apart) with some headers replaced. */
function withHeaders(request: Request, replaced: Record<string, string>): Request {
  const headers = new Headers(request.headers);
  for (const [name, value] of Object.entries(replaced)) headers.set(name, value);
  return new Request(request.url, { method: request.method, headers });
}
