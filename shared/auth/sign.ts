import { appendSignature, createSignature, webcrypto } from "http-message-sig";
import { contentDigest } from "./digest.js";
import { randomToken } from "./encoding.js";

/** The label of the signature that identifies the caller. */
export const PRIMARY_LABEL = "sig1";

/** A key that signs requests under a `keyid`. */
export interface RequestSigner {
  keyid: string;
  key: CryptoKey;
}

export interface SignOptions {
  /** Signature label; `sig1` (the caller) unless an extra signature is being added. */
  label?: string;
  /** Epoch seconds to put in `created` (tests use it to sign in the past or future). */
  created?: number;
  nonce?: string;
}

/** The components every signature covers; `content-digest` joins them when there is a body. */
export const SIGNED_COMPONENTS = ["@method", "@target-uri"] as const;

/**
 * Signs a request (RFC 9421, Ed25519): covers the method, the full target URI and, when there is
 * a body, its `Content-Digest` (RFC 9530, sha-256), with `created`, `keyid`, `nonce` and
 * `alg="ed25519"`. Returns a new Request; call again with another label to add a signature.
 */
export async function signRequest(
  request: Request,
  signer: RequestSigner,
  options: SignOptions = {},
): Promise<Request> {
  const body = new Uint8Array(await request.clone().arrayBuffer());
  const headers = new Headers(request.headers);
  const components: string[] = [...SIGNED_COMPONENTS];
  if (body.length > 0) {
    if (!headers.has("content-digest")) headers.set("content-digest", await contentDigest(body));
    components.push("content-digest");
  }
  const unsigned = new Request(request.url, { method: request.method, headers, ...(body.length > 0 ? { body } : {}) });
  const fields = await createSignature(unsigned, {
    label: options.label ?? PRIMARY_LABEL,
    components,
    parameters: {
      created: options.created ?? Math.floor(Date.now() / 1000),
      keyid: signer.keyid,
      nonce: options.nonce ?? randomToken(),
      alg: "ed25519",
    },
    signer: webcrypto.signer(signer.key),
  });
  return new Request(request.url, {
    method: request.method,
    headers: appendSignature(headers, fields),
    ...(body.length > 0 ? { body } : {}),
  });
}
