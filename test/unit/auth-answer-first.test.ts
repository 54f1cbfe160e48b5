import { component } from "http-message-sig";
import { describe, expect, it } from "vitest";
import {
  AuthError,
  checkContentDigest,
  contentDigest,
  generateKeyPair,
  importPrivateKey,
  importPublicKey,
  signAnswer,
  signRequest,
  verifyAnswer,
} from "../../shared/auth/index.js";
import { claimedDigest, parsedDigest } from "../../shared/auth/digest.js";
import { readFirstAnswer } from "../../shared/auth/verify-first.js";
import { libraryReading } from "../support/signatures.js";

// A runner's signed answer in the form signAnswer writes, and a Content-Digest in the form
// contentDigest writes, are read without the RFC 9421 library and the structured-field parser
// (shared/auth/verify-first.ts, digest.ts). These hold both readings to the library's: the same
// signature base, the same verdict on every answer, tampered or not, and the library for every
// other form.

const enc = (s: string) => new TextEncoder().encode(s) as Uint8Array<ArrayBuffer>;

const coordinator = { keyid: "coordinator:abc", key: await importPrivateKey(await generateKeyPair()) };
const runnerJwk = await generateKeyPair();
const runner = { keyid: "runner:7:3", key: await importPrivateKey(runnerJwk) };
const runnerKey = await importPublicKey(runnerJwk.x);
const otherKey = await importPublicKey((await generateKeyPair()).x);

const delivery = (body = '{"job":1}', url = "https://runner.example:8443/deliver") =>
  signRequest(new Request(url, { method: "POST", body: enc(body) }), coordinator);

/** An answer as a runner sends it: `body`, signed as the answer to `request`. */
async function answer(request: Request, status: number, body: string) {
  const headers = new Headers(await signAnswer(request, status, enc(body), runner));
  return { status, headers, body: enc(body) };
}
type Answer = Awaited<ReturnType<typeof answer>>;

/** The signature base the library builds for the answer, and its verdict, with `key`. */
const library = (a: Answer, request: Request, key: CryptoKey) =>
  libraryReading(
    { kind: "response", status: a.status, fields: [...a.headers].map(([name, value]) => ({ name, value })), request },
    key,
    {
      requiredComponents: ["@status", "content-digest", component("signature", { req: true, key: "sig1" })],
      requiredParameters: ["keyid"],
    },
  );

/** verifyAnswer's verdict: "ok" or the failure's code. */
const ours = (a: Answer, request: Request, key: CryptoKey, keyid = runner.keyid) =>
  verifyAnswer(a, a.body, request, keyid, key).then(
    () => "ok",
    (error: unknown) => {
      if (error instanceof AuthError) return error.code;
      throw error;
    },
  );

const withHeaders = (a: Answer, replaced: Record<string, string>): Answer => {
  const headers = new Headers(a.headers);
  for (const [name, value] of Object.entries(replaced)) headers.set(name, value);
  return { ...a, headers };
};

const cases: [number, string][] = [
  [200, '{"report":{"status":"finished","result":"ok"}}'],
  [202, "{}"],
  [200, '{"reports":[{"status":"error","error":"ünïcödé 🙂"}]}'],
];

describe("reading a runner's answer without the RFC 9421 library", () => {
  it("builds the library's signature base, byte for byte, for what signAnswer writes", async () => {
    for (const [status, body] of cases) {
      const request = await delivery();
      const a = await answer(request, status, body);
      const first = readFirstAnswer(a, request, "sig1");
      expect(first, body).not.toBeNull();
      const theirs = await library(a, request, runnerKey);
      expect(theirs.valid, body).toBe(true);
      expect(new TextDecoder().decode(first?.base), body).toBe(new TextDecoder().decode(theirs.base));
      expect(await ours(a, request, runnerKey), body).toBe("ok");
    }
  });

  it("agrees with the library on every tampered answer, another key, and the answer to another request", async () => {
    for (const [status, body] of cases) {
      const request = await delivery();
      const a = await answer(request, status, body);
      const input = a.headers.get("signature-input") as string;
      const signature = a.headers.get("signature") as string;
      const flipped = signature.replace(/:(.)/, (_, c: string) => `:${c === "A" ? "B" : "A"}`);
      const otherBody = enc('{"report":{"status":"error"}}');
      const variants: [string, Answer, Request][] = [
        ["status", { ...a, status: status === 200 ? 201 : 200 }, request],
        ["signature bytes", withHeaders(a, { signature: flipped }), request],
        ["created", withHeaders(a, { "signature-input": input.replace(/created=(\d+)/, "created=1$1") }), request],
        ["nonce", withHeaders(a, { "signature-input": input.replace(/nonce="(.)/, 'nonce="Z$1') }), request],
        [
          "another body with its digest",
          { ...withHeaders(a, { "content-digest": await contentDigest(otherBody) }), body: otherBody },
          request,
        ],
        ["another request", a, await delivery()],
      ];
      for (const [what, variant, to] of variants) {
        expect((await library(variant, to, runnerKey)).valid, `${body}: ${what}`).toBe(false);
        expect(await ours(variant, to, runnerKey), `${body}: ${what}`).toBe("signature-invalid");
      }
      expect((await library(a, request, otherKey)).valid).toBe(false);
      expect(await ours(a, request, otherKey)).toBe("signature-invalid");
      expect(await ours(a, request, runnerKey, "runner:7:4")).toBe("unknown-key");
      const renamed = withHeaders(a, { "signature-input": input.replace('keyid="', 'keyid="x') });
      expect(await ours(renamed, request, runnerKey)).toBe("unknown-key");
    }
  });

  it("leaves every other form to the library, whose verdict stands", async () => {
    const request = await delivery();
    const a = await answer(request, 200, "{}");
    const input = a.headers.get("signature-input") as string;
    const forms: Record<string, Record<string, string>> = {
      "parameters in another order": {
        "signature-input": input.replace(/;keyid=("[^"]*");nonce=("[^"]*")/, ";nonce=$2;keyid=$1"),
      },
      "a second member": { "signature-input": `${input}, sig2=("@status");created=1` },
      "whitespace inside": { "signature-input": input.replace('" "', '"  "') },
      "another label": {
        "signature-input": input.replace(/^sig1=/, "sig2="),
        signature: (a.headers.get("signature") as string).replace(/^sig1=/, "sig2="),
      },
    };
    for (const [what, headers] of Object.entries(forms)) {
      const variant = withHeaders(a, headers);
      expect(readFirstAnswer(variant, request, "sig1"), what).toBeNull();
      const verdict = await ours(variant, request, runnerKey);
      expect(verdict === "ok", `${what}: ${verdict}`).toBe((await library(variant, request, runnerKey)).valid);
    }
    // A keyid an sf-string has to escape: signed and verified through the library.
    const escaped = { keyid: 'runner:7:"3"', key: runner.key };
    const quoted = {
      status: 200,
      headers: new Headers(await signAnswer(request, 200, enc("{}"), escaped)),
      body: enc("{}"),
    };
    expect(readFirstAnswer(quoted, request, "sig1")).toBeNull();
    expect((await library(quoted, request, runnerKey)).valid).toBe(true);
    expect(await ours(quoted, request, runnerKey, escaped.keyid)).toBe("ok");
    // The request's own signature in a form the library reads and this does not: still verified.
    const requestForm = new Request(request.url, { method: "POST", headers: new Headers(request.headers) });
    requestForm.headers.set("signature", `${request.headers.get("signature") as string};x=1`);
    const answered = await answer(requestForm, 200, "{}");
    expect(readFirstAnswer(answered, requestForm, "sig1")).toBeNull();
    expect(await ours(answered, requestForm, runnerKey)).toBe("ok");
  });
});

describe("reading a Content-Digest without the structured-field parser", () => {
  const body = enc("{}");
  const canonical = "sha-256=:RBNvo1WzZ4oRRq0W9+hknpT7T8If536DEMBg9hyq/4o=:";

  it("reads what the parser reads, in the form it reads and in every other", async () => {
    const headers = [
      canonical,
      ` ${canonical}\t`,
      canonical.replace("/4o=", "/4p="), // stray bits in the last character: the parser's to read
      canonical.replace("RBN", "RBM"),
      `${canonical}, sha-512=:AAAA:`,
      `sha-512=:AAAA:, ${canonical}`,
      canonical.replace("sha-256", "SHA-256"),
      canonical.replace(/=:$/, ":"),
      "sha-256=:AAAA:",
      "sha-256=nope",
    ];
    for (const header of headers) {
      const ours = claimedDigest(header);
      const theirs = parsedDigest(header);
      if (theirs === "malformed") expect(ours, header).toBe("malformed");
      else expect(ours === "malformed" ? ours : new Uint8Array(ours), header).toEqual(new Uint8Array(theirs));
    }
    // And the verdict on a body, through either reading.
    expect(await checkContentDigest(canonical, body)).toBe("ok");
    expect(await checkContentDigest(` ${canonical}`, body)).toBe("ok");
    expect(await checkContentDigest(canonical.replace("RBN", "RBM"), body)).toBe("mismatch");
  });
});
