import { component, createSignature, isSignatureError, verifySignature, webcrypto } from "http-message-sig";
import { checkContentDigest, contentDigest } from "./digest.js";
import { randomToken, toBase64 } from "./encoding.js";
import { PRIMARY_LABEL, type RequestSigner } from "./sign.js";
import { AuthError } from "./verify.js";
import {
  answerBase,
  answerInput,
  ed25519Verifies,
  isPlainString,
  plainSignatureOf,
  readFirstAnswer,
} from "./verify-first.js";

/**
 * What a runner's signed answer to a delivery covers (RFC 9421 §2.4): its status, its body's
 * Content-Digest, and the coordinator's signature of the request it answers (`;req`), whose
 * nonce makes every request unique: an answer verifies only as the answer to that one request,
 * so it cannot be replayed to another, and needs no nonce or freshness of its own.
 */
const ANSWER_COMPONENTS = ["@status", "content-digest", component("signature", { req: true, key: PRIMARY_LABEL })];

const ANSWER_INVALID = "the signature does not verify with the runner's key, as the answer to this delivery";

/** An answer signed under another keyid than the runner's. */
const unknownKey = (signedAs: unknown, keyid: string) =>
  new AuthError("unknown-key", `the answer is signed as ${JSON.stringify(signedAs)}, not as the runner (${keyid})`);

const fieldsOf = (headers: Headers) => [...headers].map(([name, value]) => ({ name, value }));

/**
 * Signs a runner's answer to a delivery (`request`, as the coordinator signed it) with the
 * runner's key: returns the headers to send with `body`, `Content-Digest` and the signature's.
 * An answer that reports how the attempt ended must be signed so (see `verifyAnswer`).
 */
export async function signAnswer(
  request: Request,
  status: number,
  body: Uint8Array<ArrayBuffer>,
  signer: RequestSigner,
): Promise<Record<string, string>> {
  const digest = await contentDigest(body);
  const created = Math.floor(Date.now() / 1000);
  const nonce = randomToken();
  const requestSig = plainSignatureOf(request, PRIMARY_LABEL);
  // Written out directly in the one form readFirstAnswer reads (as signFirst does for requests);
  // anything else (a keyid an sf-string must escape, a request signed otherwise) by the library.
  if (requestSig !== null && isPlainString(signer.keyid) && signer.key.algorithm.name === "Ed25519") {
    const input = answerInput(PRIMARY_LABEL, { created, keyid: signer.keyid, nonce });
    const base = answerBase(status, digest, PRIMARY_LABEL, requestSig, input);
    const signature = new Uint8Array(await crypto.subtle.sign({ name: "Ed25519" }, signer.key, base));
    return {
      "content-digest": digest,
      "signature-input": `${PRIMARY_LABEL}=${input}`,
      signature: `${PRIMARY_LABEL}=:${toBase64(signature)}:`,
    };
  }
  const signature = await createSignature(
    { kind: "response", status, fields: [{ name: "content-digest", value: digest }], request },
    {
      label: PRIMARY_LABEL,
      components: ANSWER_COMPONENTS,
      parameters: { created, keyid: signer.keyid, nonce, alg: "ed25519" },
      signer: webcrypto.signer(signer.key),
    },
  );
  return { "content-digest": digest, "signature-input": signature.signatureInput, signature: signature.signature };
}

/**
 * Verifies a runner's answer to `request` (the coordinator's signed delivery): its body against
 * its Content-Digest, then the Ed25519 signature under `keyid` over the components above. Throws
 * an AuthError saying what is wrong.
 */
export async function verifyAnswer(
  answer: { status: number; headers: Headers },
  body: Uint8Array<ArrayBuffer>,
  request: Request,
  keyid: string,
  key: CryptoKey,
): Promise<void> {
  if (!answer.headers.has("signature") || !answer.headers.has("signature-input")) {
    throw new AuthError("signature-missing", "the answer is not signed: Signature and Signature-Input are required");
  }
  const digest = await checkContentDigest(answer.headers.get("content-digest"), body);
  if (digest === "missing") throw new AuthError("signature-missing", "the answer has no Content-Digest (sha-256)");
  if (digest === "malformed") throw new AuthError("signature-malformed", "Content-Digest is not a sha-256 digest");
  if (digest === "mismatch") throw new AuthError("digest-mismatch", "the body does not match its Content-Digest");
  const first = readFirstAnswer(answer, request, PRIMARY_LABEL);
  if (first) {
    if (first.keyid !== keyid) throw unknownKey(first.keyid, keyid);
    if (!(await ed25519Verifies(key, first.signature, first.base)))
      throw new AuthError("signature-invalid", ANSWER_INVALID);
    return;
  }
  let failure: AuthError | undefined;
  try {
    await verifySignature(
      { kind: "response", status: answer.status, fields: fieldsOf(answer.headers), request },
      {
        label: PRIMARY_LABEL,
        policy: {
          algorithms: ["ed25519"],
          requiredComponents: ANSWER_COMPONENTS,
          requiredParameters: ["keyid"],
          // Bound to the request's own signature: the age of `created` proves nothing more.
          clockSkew: Number.MAX_SAFE_INTEGER,
        },
        resolveVerifier: (candidate) => {
          if (candidate.parameters.keyid !== keyid) throw (failure = unknownKey(candidate.parameters.keyid, keyid));
          const verifier = webcrypto.verifier(key);
          return {
            ...verifier,
            verify: async (data: Uint8Array, signature: Uint8Array) =>
              Promise.resolve(verifier.verify(data, signature)).catch(() => false),
          };
        },
      },
    );
  } catch (error) {
    if (failure) throw failure;
    if (!isSignatureError(error)) throw error;
    throw new AuthError(
      error.code === "VerificationFailed" ? "signature-invalid" : "signature-malformed",
      error.code === "VerificationFailed" ? ANSWER_INVALID : error.message,
    );
  }
}
