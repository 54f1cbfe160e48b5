/**
 * A request's signature as `signFirst` (sign.ts) writes it, read without the RFC 9421 library:
 * parsing both structured fields and serializing the parameters again took most of the time of
 * a verification (more than the Ed25519 check itself). Only one exact, canonical form is read
 * here; anything else (another label beside it, other components or parameters, another order,
 * an escape in a string, a fragment in the target URI) is left to the library, so the two can
 * never disagree on what a signature covers: for the form read here, the library's signature
 * base is, byte for byte, the one built below (`test/unit/auth-verify.test.ts` holds them to it).
 *
 * A runner's signed answer to a delivery (answer.ts) is written and read the same way, its one
 * form here (`answerInput`, `readFirstAnswer`), held to the library by
 * `test/unit/auth-answer-first.test.ts`.
 */

/** A first signature in the one form read here. */
export interface FirstSignature {
  created: number;
  keyid: string;
  nonce: string;
  /** The signature's bytes (any length: the caller checks it). */
  signature: Uint8Array<ArrayBuffer>;
  /** The signature base its bytes must verify against. */
  base: Uint8Array<ArrayBuffer>;
}

/** An sf-string that needs no escape: printable ASCII but `"` and `\`. */
const PLAIN = String.raw`[\x20\x21\x23-\x5b\x5d-\x7e]*`;
const PLAIN_STRING = `"(${PLAIN})"`;
/** Signature-Input's member after `<label>=`: the components and parameters signFirst writes, in its order. */
const INPUT = new RegExp(
  String.raw`^\("@method" "@target-uri"( "content-digest")?\);created=(0|[1-9][0-9]{0,14});keyid=${PLAIN_STRING};nonce=${PLAIN_STRING};alg="ed25519"$`,
);
/** Signature-Input's member of a runner's answer, as `answerInput` writes it. */
const ANSWER_INPUT = new RegExp(
  String.raw`^\("@status" "content-digest" "signature";req;key="([a-z0-9]{1,16})"\);created=(0|[1-9][0-9]{0,14});keyid=${PLAIN_STRING};nonce=${PLAIN_STRING};alg="ed25519"$`,
);
const PLAIN_TEXT = new RegExp(`^${PLAIN}$`);
/** Signature's member after `<label>=`: an sf-binary of canonical base64. */
const BINARY = /^:((?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?):$/;

const encoder = new TextEncoder();

/**
 * The request's signature `label` when both signature fields hold exactly it, in the one form
 * read here, and it covers the body's `content-digest` when `hasBody`; null otherwise (the
 * library then reads it, and names what is wrong with it).
 */
export function readFirstSignature(request: Request, label: string, hasBody: boolean): FirstSignature | null {
  const input = memberOf(request.headers.get("signature-input"), label);
  const sig = memberOf(request.headers.get("signature"), label);
  if (input === null || sig === null) return null;
  const fields = INPUT.exec(input);
  const bytes = BINARY.exec(sig);
  if (!fields || !bytes) return null;
  const [, digestCovered, created, keyid, nonce] = fields;
  const signature = bytes[1];
  if (created === undefined || keyid === undefined || nonce === undefined || signature === undefined) return null;
  if (hasBody && !digestCovered) return null;
  // The library derives @target-uri from the URL as the Request holds it, and refuses one with a
  // fragment or without an authority.
  const target = request.url;
  if (target.includes("#") || !target.includes("://")) return null;
  const lines = [`"@method": ${request.method}`, `"@target-uri": ${target}`];
  if (digestCovered) {
    const digest = request.headers.get("content-digest");
    if (digest === null) return null;
    lines.push(`"content-digest": ${digest.replace(/^[\t ]+|[\t ]+$/g, "")}`);
  }
  lines.push(`"@signature-params": ${input}`);
  return {
    created: Number(created),
    keyid,
    nonce,
    signature: decodeBase64(signature),
    base: encoder.encode(lines.join("\n")) as Uint8Array<ArrayBuffer>,
  };
}

/** A runner's answer's signature in the one form read here (its keyid, its bytes, its base). */
export interface FirstAnswerSignature {
  keyid: string;
  signature: Uint8Array<ArrayBuffer>;
  base: Uint8Array<ArrayBuffer>;
}

/**
 * The answer's signature `label` when both its signature fields hold exactly it, in the form
 * signAnswer writes (its status, its Content-Digest and the request's signature `label`, whose
 * member in the request is in the one form read here too); null otherwise (the library reads it).
 */
export function readFirstAnswer(
  answer: { status: number; headers: Headers },
  request: Request,
  label: string,
): FirstAnswerSignature | null {
  const input = memberOf(answer.headers.get("signature-input"), label);
  const sig = memberOf(answer.headers.get("signature"), label);
  const requestSig = plainSignatureOf(request, label);
  const digest = answer.headers.get("content-digest");
  if (input === null || sig === null || requestSig === null || digest === null) return null;
  const fields = ANSWER_INPUT.exec(input);
  const bytes = BINARY.exec(sig);
  if (!fields || !bytes) return null;
  const [, key, , keyid] = fields;
  const signature = bytes[1];
  if (key !== label || keyid === undefined || signature === undefined) return null;
  return {
    keyid,
    signature: decodeBase64(signature),
    base: answerBase(answer.status, digest, label, requestSig, input),
  };
}

/**
 * Signature-Input's member (after `<label>=`) of a runner's answer signed under `label`: its
 * status, its Content-Digest and the request's signature `label`, with these parameters, which
 * must be plain sf-strings (isPlainString).
 */
export function answerInput(label: string, parameters: { created: number; keyid: string; nonce: string }): string {
  const { created, keyid, nonce } = parameters;
  return `("@status" "content-digest" "signature";req;key="${label}");created=${created};keyid="${keyid}";nonce="${nonce}";alg="ed25519"`;
}

/**
 * Whether an Ed25519 signature verifies its base. WebCrypto throws on input it cannot even try:
 * that is a signature that does not verify.
 */
export const ed25519Verifies = (
  key: CryptoKey,
  signature: Uint8Array<ArrayBuffer>,
  base: Uint8Array<ArrayBuffer>,
): Promise<boolean> => crypto.subtle.verify("Ed25519", key, signature, base).catch(() => false);

/** The request's signature `label` as signFirst writes it (`:<canonical base64>:`, nothing else), or null. */
export function plainSignatureOf(request: Request, label: string): string | null {
  const member = memberOf(request.headers.get("signature"), label);
  return member !== null && BINARY.test(member) ? member : null;
}

/** Whether text is an sf-string's content that needs no escape. */
export const isPlainString = (text: string): boolean => PLAIN_TEXT.test(text);

/**
 * The signature base of an answer's signature (RFC 9421 §2.5) over its status, its
 * Content-Digest and the request's signature `label` (`;req`), given its parameters as
 * Signature-Input holds them (`input`, after `<label>=`).
 */
export function answerBase(
  status: number,
  digest: string,
  label: string,
  requestSig: string,
  input: string,
): Uint8Array<ArrayBuffer> {
  const lines = [
    `"@status": ${status}`,
    `"content-digest": ${digest.replace(/^[\t ]+|[\t ]+$/g, "")}`,
    `"signature";req;key="${label}": ${requestSig}`,
    `"@signature-params": ${input}`,
  ];
  return encoder.encode(lines.join("\n")) as Uint8Array<ArrayBuffer>;
}

/** A field's one member `<label>=…` (its value), or null when it holds anything else. */
function memberOf(field: string | null, label: string): string | null {
  if (field === null || !field.startsWith(`${label}=`)) return null;
  const value = field.slice(label.length + 1);
  // A second member (or a parameter list with a comma in a string, which the library reads).
  return value.includes(",") ? null : value;
}

/** The bytes of base64 text (which the caller has checked is base64). */
export function decodeBase64(text: string): Uint8Array<ArrayBuffer> {
  const binary = atob(text);
  const out = new Uint8Array(binary.length);
  for (let i = 0; i < binary.length; i++) out[i] = binary.charCodeAt(i);
  return out;
}
