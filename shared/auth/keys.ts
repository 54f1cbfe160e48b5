import { z } from "zod";
import { PublicKey } from "../model/common.js";
import { toBase64Url } from "./encoding.js";

/**
 * Ed25519 keys as JWKs (RFC 8037): the private key file of an actor, a runner or the coordinator
 * is `{"kty":"OKP","crv":"Ed25519","x":"<public>","d":"<private>"}`; the public key alone is `x`,
 * the 43-character base64url text the API stores as `pubkey`.
 */
export const PrivateJwk = z.object({
  kty: z.literal("OKP"),
  crv: z.literal("Ed25519"),
  x: PublicKey,
  d: z
    .string()
    .length(43)
    .regex(/^[A-Za-z0-9_-]+$/),
});
export type PrivateJwk = z.infer<typeof PrivateJwk>;

/** The public half alone: `{"kty":"OKP","crv":"Ed25519","x":"<public>"}`. */
export const PublicJwk = PrivateJwk.omit({ d: true });
export type PublicJwk = z.infer<typeof PublicJwk>;

const ED25519 = { name: "Ed25519" } as const;

/** A fresh key pair, exported as a private JWK (which carries the public key too). */
export async function generateKeyPair(): Promise<PrivateJwk> {
  const pair = (await crypto.subtle.generateKey(ED25519, true, ["sign", "verify"])) as CryptoKeyPair;
  const jwk = (await crypto.subtle.exportKey("jwk", pair.privateKey)) as JsonWebKey;
  return PrivateJwk.parse({ kty: jwk.kty, crv: jwk.crv, x: jwk.x, d: jwk.d });
}

/** Imports a private JWK for signing. */
export function importPrivateKey(jwk: PrivateJwk): Promise<CryptoKey> {
  return crypto.subtle.importKey("jwk", { kty: "OKP", crv: "Ed25519", x: jwk.x, d: jwk.d }, ED25519, false, ["sign"]);
}

/** Imports a public key (`x`) for verification. */
export function importPublicKey(x: string): Promise<CryptoKey> {
  return crypto.subtle.importKey("jwk", { kty: "OKP", crv: "Ed25519", x }, ED25519, true, ["verify"]);
}

/** The RFC 7638 JWK thumbprint of a public key: the key id the coordinator publishes. */
export async function keyThumbprint(x: string): Promise<string> {
  const canonical = JSON.stringify({ crv: "Ed25519", kty: "OKP", x });
  const digest = await crypto.subtle.digest("SHA-256", new TextEncoder().encode(canonical));
  return toBase64Url(new Uint8Array(digest));
}

/** Parses a private JWK from text (a key file, a secret), naming what is wrong. */
export function parsePrivateJwk(text: string, source: string): PrivateJwk {
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch {
    throw new Error(`${source} is not JSON: expected an Ed25519 private JWK`);
  }
  const parsed = PrivateJwk.safeParse(value);
  if (!parsed.success) {
    const issue = parsed.error.issues[0];
    throw new Error(`${source} is not an Ed25519 private JWK (${issue?.path.join(".") || "key"}: ${issue?.message})`);
  }
  return parsed.data;
}
