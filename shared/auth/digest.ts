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
 * Checks a body against its `Content-Digest` before anything parses the body. Only sha-256 is
 * accepted; other algorithms may be present beside it.
 */
export async function checkContentDigest(header: string | null, body: Uint8Array<ArrayBuffer>): Promise<DigestCheck> {
  if (header === null) return "missing";
  let member: unknown;
  const plain = SHA256_ONLY.exec(header)?.[1];
  if (plain !== undefined) member = decodeBase64(plain).buffer;
  else {
    try {
      member = parseDictionary(header).get("sha-256")?.[0];
    } catch {
      return "malformed";
    }
  }
  if (!(member instanceof ArrayBuffer)) return "malformed";
  const actual = new Uint8Array(await crypto.subtle.digest("SHA-256", body));
  const claimed = new Uint8Array(member);
  return claimed.length === actual.length && claimed.every((b, i) => b === actual[i]) ? "ok" : "mismatch";
}
