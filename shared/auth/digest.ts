import { parseDictionary } from "structured-headers";
import { toBase64 } from "./encoding.js";

/** `Content-Digest` (RFC 9530) with sha-256, as a structured-field dictionary. */
export async function contentDigest(body: Uint8Array<ArrayBuffer>): Promise<string> {
  const digest = new Uint8Array(await crypto.subtle.digest("SHA-256", body));
  return `sha-256=:${toBase64(digest)}:`;
}

export type DigestCheck = "ok" | "missing" | "malformed" | "mismatch";

/**
 * Checks a body against its `Content-Digest` before anything parses the body. Only sha-256 is
 * accepted; other algorithms may be present beside it.
 */
export async function checkContentDigest(header: string | null, body: Uint8Array<ArrayBuffer>): Promise<DigestCheck> {
  if (header === null) return "missing";
  let member: unknown;
  try {
    member = parseDictionary(header).get("sha-256")?.[0];
  } catch {
    return "malformed";
  }
  if (!(member instanceof ArrayBuffer)) return "malformed";
  const actual = new Uint8Array(await crypto.subtle.digest("SHA-256", body));
  const claimed = new Uint8Array(member);
  return claimed.length === actual.length && claimed.every((b, i) => b === actual[i]) ? "ok" : "mismatch";
}
