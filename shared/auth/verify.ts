import { isSignatureError, SignatureErrorCode, verifySignature, webcrypto, type Verifier } from "http-message-sig";
import { checkContentDigest } from "./digest.js";
import { PRIMARY_LABEL, SIGNED_COMPONENTS } from "./sign.js";
import { ed25519Verifies, readFirstSignature } from "./verify-first.js";

/** Why a request's signature was refused; each becomes a distinct 401 problem type. */
export type AuthFailure =
  | "signature-missing"
  | "signature-malformed"
  | "signature-invalid"
  | "digest-mismatch"
  | "signature-expired"
  | "signature-from-future"
  | "nonce-replayed"
  | "unknown-key";

/** A refused signature: `code` names the failure, the message says what exactly. */
export class AuthError extends Error {
  override name = "AuthError";
  constructor(
    readonly code: AuthFailure,
    message: string,
  ) {
    super(message);
  }
}

/** What a verified signature proves. */
export interface VerifiedRequest {
  keyid: string;
  nonce: string;
  created: number;
}

export interface VerifyOptions {
  /** The raw body, read once before anything parses it. */
  body: Uint8Array<ArrayBuffer>;
  /** Current time, epoch seconds. */
  now: number;
  /** How far `created` may be from `now`, either way. */
  skewSeconds: number;
  /** Finds the public key for a keyid; null when there is none. Storage errors propagate. */
  resolveKey(keyid: string): Promise<CryptoKey | null>;
  /** Which signature to check (`sig1` by default). */
  label?: string;
}

const NONCE = /^[A-Za-z0-9_-]{16,128}$/;
const ED25519_SIGNATURE_BYTES = 64;

/**
 * Verifies a request's RFC 9421 signature: the body against its Content-Digest first (the body
 * is not parsed before this passes), then freshness (`created` within the skew), then the
 * Ed25519 signature over method, target URI and digest. Replayed nonces are the caller's check,
 * since it needs storage. A signature in the form this module's signer writes is read directly
 * (verify-first.ts); any other goes through the RFC 9421 library.
 */
export async function verifyRequest(request: Request, options: VerifyOptions): Promise<VerifiedRequest> {
  if (!request.headers.has("signature") || !request.headers.has("signature-input")) {
    throw new AuthError(
      "signature-missing",
      "the request is not signed: Signature and Signature-Input headers are required",
    );
  }
  const hasBody = options.body.length > 0;
  if (hasBody) {
    const digest = await checkContentDigest(request.headers.get("content-digest"), options.body);
    if (digest === "missing")
      throw new AuthError("signature-missing", "a request with a body needs a Content-Digest header (sha-256)");
    if (digest === "malformed")
      throw new AuthError("signature-malformed", "Content-Digest is not a sha-256 structured-field digest");
    if (digest === "mismatch") throw new AuthError("digest-mismatch", "the body does not match its Content-Digest");
  }

  const label = options.label ?? PRIMARY_LABEL;
  const first = readFirstSignature(request, label, hasBody);
  if (first) {
    const { created, keyid, nonce } = first;
    const key = await checkedKey({ created, keyid, nonce }, first.signature.length, options);
    if (key.algorithm.name !== "Ed25519")
      throw new AuthError("signature-malformed", `the key ${JSON.stringify(keyid)} names is not an Ed25519 key`);
    if (!(await ed25519Verifies(key, first.signature, first.base)))
      throw new AuthError("signature-invalid", SIGNATURE_INVALID);
    return { keyid, nonce, created };
  }

  let failure: AuthError | undefined;
  try {
    const verified = await verifySignature<Verifier>(request, {
      label,
      policy: {
        algorithms: ["ed25519"],
        requiredComponents: hasBody ? [...SIGNED_COMPONENTS, "content-digest"] : [...SIGNED_COMPONENTS],
        requiredParameters: ["created", "keyid", "nonce"],
        // Freshness is checked below with precise errors; the library's own check is disabled.
        clockSkew: Number.MAX_SAFE_INTEGER,
        now: options.now,
      },
      resolveVerifier: async (candidate) => {
        let key: CryptoKey;
        try {
          key = await checkedKey(candidate.parameters, candidate.signature.length, options);
        } catch (error) {
          if (error instanceof AuthError) failure = error;
          throw error;
        }
        const verifier = webcrypto.verifier(key);
        // WebCrypto throws on input it cannot even try: that is a signature that does not verify.
        return {
          ...verifier,
          verify: async (data: Uint8Array, signature: Uint8Array) =>
            Promise.resolve(verifier.verify(data, signature)).catch(() => false),
        };
      },
    });
    return {
      keyid: verified.parameters.keyid as string,
      nonce: verified.parameters.nonce as string,
      created: verified.parameters.created as number,
    };
  } catch (error) {
    if (failure) throw failure;
    throw describeSignatureError(error);
  }
}

const SIGNATURE_INVALID = "the signature does not verify with the key its keyid names";

/**
 * Checks a signature's parameters (their types, the nonce's form, freshness) and length, then
 * finds the key its keyid names: the same checks, with the same errors, whichever way the
 * signature was read.
 */
async function checkedKey(
  parameters: Record<string, unknown>,
  signatureLength: number,
  options: VerifyOptions,
): Promise<CryptoKey> {
  const { created, expires, keyid, nonce } = parameters;
  if (typeof created !== "number" || typeof keyid !== "string" || typeof nonce !== "string")
    throw new AuthError("signature-malformed", "created must be an integer, keyid and nonce strings");
  if (!NONCE.test(nonce)) throw new AuthError("signature-malformed", "nonce must be 16 to 128 base64url characters");
  if (created > options.now + options.skewSeconds) {
    throw new AuthError(
      "signature-from-future",
      `created is ${created - options.now} s in the future (allowed skew ${options.skewSeconds} s)`,
    );
  }
  if (created < options.now - options.skewSeconds || (typeof expires === "number" && expires < options.now)) {
    throw new AuthError(
      "signature-expired",
      `the signature is ${options.now - created} s old (allowed ${options.skewSeconds} s)`,
    );
  }
  if (signatureLength !== ED25519_SIGNATURE_BYTES) {
    throw new AuthError(
      "signature-malformed",
      `an Ed25519 signature is ${ED25519_SIGNATURE_BYTES} bytes, not ${signatureLength}`,
    );
  }
  const key = await options.resolveKey(keyid);
  if (!key) throw new AuthError("unknown-key", `no key is registered as ${JSON.stringify(keyid)}`);
  return key;
}

function describeSignatureError(error: unknown): Error {
  if (!isSignatureError(error)) return error as Error;
  switch (error.code) {
    case SignatureErrorCode.VerificationFailed:
      return new AuthError("signature-invalid", SIGNATURE_INVALID);
    case SignatureErrorCode.ResolverFailed:
      // Not one of ours (those are rethrown above): storage failed while looking up the key.
      return (error.cause as Error) ?? error;
    case SignatureErrorCode.MissingField:
      return new AuthError("signature-missing", error.message);
    default:
      return new AuthError("signature-malformed", error.message);
  }
}
