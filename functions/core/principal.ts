import { AuthError, type KeyId } from "../../shared/auth/index.js";
import { Problem } from "./problem.js";

/** Who a verified request comes from. */
export type Principal = KeyId;

/** Tells a client what to sign, on every 401 (RFC 9421 §5.1). */
const ACCEPT_SIGNATURE = 'sig1=("@method" "@target-uri" "content-digest");created;keyid;nonce;alg="ed25519"';

/** An AuthError as a 401 problem whose type names the failure. */
export function unauthorized(error: AuthError): Problem {
  return new Problem(error.code, error.message, {}, { "accept-signature": ACCEPT_SIGNATURE });
}

/** A signature's nonce whose spending a route leaves to the script that does its work. */
export interface SignatureNonce {
  keyid: string;
  value: string;
  ttlMs: number;
}

/** The 401 of a request whose nonce was used before. */
export function nonceReplayed(): Problem {
  return unauthorized(
    new AuthError("nonce-replayed", "this nonce was already used: sign every request with a new nonce"),
  );
}
