import { appendSignature, createSignature, webcrypto } from "http-message-sig";
import { contentDigest } from "./digest.js";
import { randomToken, toBase64 } from "./encoding.js";

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
  return signedRequest(
    request.url,
    { method: request.method, headers: request.headers, ...(body.length > 0 ? { body } : {}) },
    signer,
    options,
  );
}

/** What {@link signedRequest} makes a request of. */
export interface RequestParts {
  method: string;
  headers?: HeadersInit;
  body?: string | Uint8Array<ArrayBuffer>;
}

/**
 * A request made from its parts and signed as {@link signRequest} signs: for a sender that has
 * the body at hand, which then is neither copied nor read back from a Request.
 */
export async function signedRequest(
  url: string,
  parts: RequestParts,
  signer: RequestSigner,
  options: SignOptions = {},
): Promise<Request> {
  // The target URI as a Request holds it (and signs it): parsed and serialized.
  const target = new URL(url).href;
  // TextEncoder's bytes are always a plain ArrayBuffer's, whatever Node's types allow for.
  const body: Uint8Array<ArrayBuffer> =
    typeof parts.body === "string"
      ? (encoder.encode(parts.body) as Uint8Array<ArrayBuffer>)
      : (parts.body ?? new Uint8Array(0));
  const headers = new Headers(parts.headers);
  const components: string[] = [...SIGNED_COMPONENTS];
  if (body.length > 0) {
    if (!headers.has("content-digest")) headers.set("content-digest", await contentDigest(body));
    components.push("content-digest");
  }
  const label = options.label ?? PRIMARY_LABEL;
  const parameters = {
    created: options.created ?? Math.floor(Date.now() / 1000),
    keyid: signer.keyid,
    nonce: options.nonce ?? randomToken(),
    alg: "ed25519",
  };
  const withBody = body.length > 0 ? { body } : {};
  const signed =
    (await signFirst(parts.method, target, headers, components, label, parameters, signer.key)) ??
    appendSignature(
      headers,
      await createSignature(new Request(target, { method: parts.method, headers, ...withBody }), {
        label,
        components,
        parameters,
        signer: webcrypto.signer(signer.key),
      }),
    );
  return new Request(target, { method: parts.method, headers: signed, ...withBody });
}

const encoder = new TextEncoder();
/** What RFC 8941 allows in a label (a dictionary key). */
const LABEL = /^[a-z*][a-z0-9_\-.*]*$/;
/** What an sf-string may hold: printable ASCII. */
const PRINTABLE = /^[\x20-\x7e]*$/;

/**
 * The request's first signature, written out directly: the signature base of this module's
 * components and parameters is a few lines of text, and building it through a general RFC 9421
 * library (parsing and serializing structured fields, twice over) was a sixth of the Worker's
 * CPU per pushed job. Null for what it does not write (a second signature, text an sf-string
 * cannot hold): the library does those. `test/unit/auth.test.ts` holds both to the same bytes.
 */
async function signFirst(
  method: string,
  target: string,
  headers: Headers,
  components: readonly string[],
  label: string,
  parameters: { created: number; keyid: string; nonce: string; alg: string },
  key: CryptoKey,
): Promise<Headers | null> {
  const { created, keyid, nonce, alg } = parameters;
  if (headers.has("signature") || headers.has("signature-input")) return null;
  if (!LABEL.test(label) || !Number.isSafeInteger(created) || key.algorithm.name !== "Ed25519") return null;
  if (![keyid, nonce, target].every((text) => PRINTABLE.test(text))) return null;
  const sfString = (text: string) => `"${text.replace(/[\\"]/g, (c) => `\\${c}`)}"`;
  const params = `(${components.map(sfString).join(" ")});created=${created};keyid=${sfString(keyid)};nonce=${sfString(nonce)};alg=${sfString(alg)}`;
  const lines = components.map((name) => {
    const value =
      name === "@method"
        ? method
        : name === "@target-uri"
          ? target
          : (headers.get(name) ?? "").replace(/^[\t ]+|[\t ]+$/g, "");
    return `${sfString(name)}: ${value}`;
  });
  lines.push(`"@signature-params": ${params}`);
  const signature = new Uint8Array(
    await crypto.subtle.sign({ name: "Ed25519" }, key, encoder.encode(lines.join("\n"))),
  );
  headers.set("signature-input", `${label}=${params}`);
  headers.set("signature", `${label}=:${toBase64(signature)}:`);
  return headers;
}
