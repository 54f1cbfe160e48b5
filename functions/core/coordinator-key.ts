import { importPrivateKey, keyThumbprint, parsePrivateJwk } from "../../shared/auth/index.js";
import { Problem } from "./problem.js";
import type { Env } from "./env.js";

/** One of the coordinator's signing keys: its key id (JWK thumbprint), public part and signer. */
export interface CoordinatorKey {
  kid: string;
  x: string;
  key: CryptoKey;
}

export interface CoordinatorKeys {
  /** Signs deliveries now. */
  current: CoordinatorKey;
  /** Published ahead of a rotation, so receivers can trust it before it signs. */
  next?: CoordinatorKey;
}

let cached: { source: string; keys: Promise<CoordinatorKeys> } | undefined;

async function load(secret: string, name: string): Promise<CoordinatorKey> {
  let jwk;
  try {
    jwk = parsePrivateJwk(secret, name);
  } catch (error) {
    throw new Problem("misconfigured", (error as Error).message);
  }
  return { kid: await keyThumbprint(jwk.x), x: jwk.x, key: await importPrivateKey(jwk) };
}

/**
 * The coordinator's own Ed25519 keys, from the COORDINATOR_SIGNING_KEY secret (and
 * COORDINATOR_SIGNING_KEY_NEXT during a rotation). Without the secret there is no fallback key:
 * whatever needs one answers 503.
 */
export function coordinatorKeys(env: Env): Promise<CoordinatorKeys> {
  const current = env.COORDINATOR_SIGNING_KEY;
  if (!current) {
    return Promise.reject(
      new Problem("signing-key-missing", "set the COORDINATOR_SIGNING_KEY secret (an Ed25519 private JWK)"),
    );
  }
  const source = `${current}\n${env.COORDINATOR_SIGNING_KEY_NEXT ?? ""}`;
  if (cached?.source !== source) {
    const keys = (async (): Promise<CoordinatorKeys> => {
      const loaded = await load(current, "COORDINATOR_SIGNING_KEY");
      const next = env.COORDINATOR_SIGNING_KEY_NEXT
        ? await load(env.COORDINATOR_SIGNING_KEY_NEXT, "COORDINATOR_SIGNING_KEY_NEXT")
        : undefined;
      return next ? { current: loaded, next } : { current: loaded };
    })();
    cached = { source, keys };
    keys.catch(() => (cached = undefined));
  }
  return cached.keys;
}
