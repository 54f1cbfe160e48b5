import type { MiddlewareHandler } from "hono";
import { AuthError, importPublicKey, parseKeyId, verifyRequest, type KeyId } from "../../shared/auth/index.js";
import type { Store } from "../../shared/store/index.js";
import { callRedis } from "../../shared/store/index.js";
import type { Config } from "../config.js";
import { RUNNER_EVENTS } from "../flow/scope.js";
import { keyCache } from "./key-cache.js";
import { Problem } from "./problem.js";
import type { AppEnv } from "./store.js";

/** Who a verified request comes from. */
export type Principal = KeyId;

/** What the signature check leaves on the context for routes. */
export interface AuthVariables {
  principal: Principal;
  /** The raw body the signature covered. */
  body: Uint8Array<ArrayBuffer>;
  /** On runner webhooks: the nonce, left for the job's Durable Object to check. */
  deferredNonce?: { keyid: string; value: string; ttlMs: number };
}

/**
 * Runner webhooks whose nonce the job's Durable Object checks in its own storage (the signed
 * URL can only reach that object), sparing a storage command per report.
 */
const DEFERRED_NONCE = new RegExp(`^/v1/contexts/\\d+/(flows/\\d+/jobs/\\d+|jobs/\\d+/\\d+)/(${RUNNER_EVENTS.join("|")})$`);

/** Tells a client what to sign, on every 401 (RFC 9421 §5.1). */
const ACCEPT_SIGNATURE = 'sig1=("@method" "@target-uri" "content-digest");created;keyid;nonce;alg="ed25519"';

/** An AuthError as a 401 problem whose type names the failure. */
export function unauthorized(error: AuthError): Problem {
  return new Problem(401, error.code, "Unauthorized", error.message, {}, { "accept-signature": ACCEPT_SIGNATURE });
}

/** Looks up the public key a keyid names: an actor's, a runner's, or the bare key itself. */
function keyResolver(store: Store, config: Config): (keyid: string) => Promise<CryptoKey | null> {
  return async (keyid) => {
    const parsed = parseKeyId(keyid);
    if (!parsed) return null;
    if (parsed.kind === "key") return importPublicKey(parsed.pubkey);
    return keyCache.get(store.keys.prefix, keyid, config.keyCacheSeconds, async () => {
      const record =
        parsed.kind === "actor"
          ? await store.actors.find({ id: parsed.id })
          : await store.runners.find({ context_id: parsed.contextId, id: parsed.id });
      return record?.pubkey ?? null;
    });
  };
}

/**
 * Verifies the request's signature and refuses replayed nonces, then puts the principal and the
 * raw body on the context. The body is read once here, checked against its digest, and only
 * then parsed by the route's validator (Hono reuses the bytes read here).
 */
export const authenticate: MiddlewareHandler<AppEnv> = async (c, next) => {
  const body = new Uint8Array(await c.req.arrayBuffer());
  const { store, config } = c.var;
  const now = Math.floor(Date.now() / 1000);
  let verified;
  try {
    verified = await verifyRequest(c.req.raw, { body, now, skewSeconds: config.skewSeconds, resolveKey: keyResolver(store, config) });
  } catch (error) {
    throw error instanceof AuthError ? unauthorized(error) : error;
  }
  const principal = parseKeyId(verified.keyid) as Principal;
  // A nonce must be remembered as long as a signature carrying it could still be fresh.
  const ttlSeconds = 2 * config.skewSeconds + 60;
  if (DEFERRED_NONCE.test(c.req.path)) {
    // Runner webhooks take reports from runners only: anyone else is refused before the body is read.
    if (principal.kind !== "runner") {
      throw new Problem(403, "forbidden", "Forbidden", `only runners report on jobs; this request is signed as ${verified.keyid}`, { needed: ["runner"] });
    }
    c.set("deferredNonce", { keyid: verified.keyid, value: verified.nonce, ttlMs: ttlSeconds * 1000 });
    c.set("principal", principal);
    c.set("body", body);
    await next();
    return;
  }
  const nonceKey = store.keys.nonce(verified.keyid, verified.nonce, principal.kind === "runner" ? principal.contextId : undefined);
  const ttl = String(ttlSeconds);
  // The value is this request's own token: if the client library retries the SET after it took
  // effect, GET shows our own token back and the nonce still counts as fresh.
  const token = crypto.randomUUID();
  const previous = await callRedis(() => store.redis.exec<string | null>(["SET", nonceKey, token, "NX", "GET", "EX", ttl]));
  if (previous !== null && previous !== token) {
    throw unauthorized(new AuthError("nonce-replayed", "this nonce was already used: sign every request with a new nonce"));
  }
  c.set("principal", principal);
  c.set("body", body);
  await next();
};

/**
 * Checks an additional signature on an already authenticated request: the countersignature of
 * an operator (registration) or of a new key (rotation). It must be labelled `label`, name its
 * key as `key:<pubkey>` with a pubkey from `allowed`, and cover what the primary signature
 * covers. Returns the key that signed; a missing or bad countersignature is a 403 naming it.
 */
export async function verifyCountersignature(
  request: Request,
  body: Uint8Array<ArrayBuffer>,
  config: Config,
  label: string,
  allowed: ReadonlySet<string>,
  needs: string,
): Promise<string> {
  try {
    const verified = await verifyRequest(request, {
      body,
      now: Math.floor(Date.now() / 1000),
      skewSeconds: config.skewSeconds,
      label,
      resolveKey: async (keyid) => {
        const parsed = parseKeyId(keyid);
        return parsed?.kind === "key" && allowed.has(parsed.pubkey) ? importPublicKey(parsed.pubkey) : null;
      },
    });
    return (parseKeyId(verified.keyid) as { pubkey: string }).pubkey;
  } catch (error) {
    if (!(error instanceof AuthError)) throw error;
    throw new Problem(403, "countersignature-required", "Forbidden", `${needs}: ${error.message}`, { label });
  }
}
