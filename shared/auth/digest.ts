import { parseDictionary } from "structured-headers";
import { toBase64 } from "./encoding.js";
import { decodeBase64 } from "./verify-first.js";

/** `Content-Digest` (RFC 9530) with sha-256, as a structured-field dictionary. */
export async function contentDigest(body: Uint8Array<ArrayBuffer>): Promise<string> {
  const digest = new Uint8Array(await crypto.subtle.digest("SHA-256", body));
  return `sha-256=:${toBase64(digest)}:`;
}

export type DigestCheck = "ok" | "missing" | "malformed" | "mismatch";

/**
 * The field as contentDigest writes it, and nothing else: sha-256 alone, 32 bytes in canonical
 * base64 (the last character before the padding carries no stray bits). Read without the
 * structured-field parser, which took most of a check's time; any other form goes to the parser.
 */
const SHA256_ONLY = /^sha-256=:([A-Za-z0-9+/]{42}[AEIMQUYcgkosw048]=):$/;

/**
 * The sha-256 digest a `Content-Digest` claims, as the structured-field parser reads it;
 * "malformed" when the field does not parse or holds no sha-256 byte sequence.
 */
export function parsedDigest(header: string): ArrayBuffer | "malformed" {
  try {
    const member = parseDictionary(header).get("sha-256")?.[0];
    return member instanceof ArrayBuffer ? member : "malformed";
  } catch {
    return "malformed";
  }
}

/** The same, the form contentDigest writes read directly (SHA256_ONLY), any other by the parser. */
export function claimedDigest(header: string): ArrayBuffer | "malformed" {
  const plain = SHA256_ONLY.exec(header)?.[1];
  return plain !== undefined ? decodeBase64(plain).buffer : parsedDigest(header);
}

/**
 * Checks a body against its `Content-Digest` before anything parses the body. Only sha-256 is
 * accepted; other algorithms may be present beside it.
 */
export async function checkContentDigest(header: string | null, body: Uint8Array<ArrayBuffer>): Promise<DigestCheck> {
  if (header === null) return "missing";
  const member = claimedDigest(header);
  if (member === "malformed") return "malformed";
  const actual = new Uint8Array(await crypto.subtle.digest("SHA-256", body));
  const claimed = new Uint8Array(member);
  return claimed.length === actual.length && claimed.every((b, i) => b === actual[i]) ? "ok" : "mismatch";
}
