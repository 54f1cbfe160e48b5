import type { HonoRequest, MiddlewareHandler } from "hono";
import { AuthError, importPublicKey, parseKeyId, verifyRequest, type KeyId } from "../../shared/auth/index.js";
import { readBoundedBody } from "../../shared/http/body.js";
import { formatBytes, SIZE_LIMITS } from "../../shared/model/index.js";
import type { Store } from "../../shared/store/index.js";
import type { Config } from "../core/config.js";
import { keyCache } from "../core/key-cache.js";
import { nonceReplayed, unauthorized, type Principal } from "../core/principal.js";
import { Problem } from "../core/problem.js";
import { RUNNER_EVENTS } from "../core/scopes.js";
import type { AppEnv } from "./app-env.js";

/**
 * Runner webhooks whose nonce the job's Durable Object checks in its own storage (the signed
 * URL can only reach that object), sparing a storage command per report.
 */
const DEFERRED_NONCE = new RegExp(
  `^/v1/contexts/\\d+/(flows/\\d+/jobs/\\d+|jobs/\\d+/\\d+)/(${RUNNER_EVENTS.join("|")})$`,
);

/**
 * A runner's batch of reports: its heartbeat and log reports carry the nonce to their jobs'
 * objects, the others are idempotent by themselves (see reportRunnerEvents).
 */
const BATCHED_REPORTS = /^\/v1\/contexts\/\d+\/runners\/\d+\/reports$/;

/**
 * A flow submission (POST), or a start of a flow from a template (a submission too): its
 * reservation script spends the nonce (see submitFlow).
 */
const SUBMISSION = /^\/v1\/contexts\/\d+\/(flows|templates\/[^/]+\/flows)$/;

/** Where a WebSocket ticket may stand for a signature: the event streams and the JSON-RPC session. */
const TICKET_PATHS = /^(\/v1\/contexts\/\d+(\/flows\/\d+)?\/events|\/rpc)$/;

/**
 * How long before its database's identity was made (Keys.storeIdentity) a signature may have
 * been made: the time a request takes to arrive, and clocks a little apart.
 */
export const RESET_GRACE_SECONDS = 2;

/**
 * Refuses a signature made before the database was (wiped and) made again, less
 * RESET_GRACE_SECONDS: the nonces it holds went with the old one, so a request captured before
 * could otherwise be replayed while its signature is still fresh. The identity is read with the
 * key epoch, at most once a second per isolate: no command of its own.
 */
async function refuseIfBeforeReset(store: Store, created: number): Promise<void> {
  const { bornMs } = await keyCache.reading(store.keys.prefix, () => store.keyEpoch.read());
  const born = Math.floor(bornMs / 1000);
  if (created >= born - RESET_GRACE_SECONDS) return;
  throw unauthorized(
    new AuthError(
      "signature-expired",
      `the signature was made at ${created}, before this coordinator's storage was made (${born}, after a reset): sign the request again`,
    ),
  );
}

/** The registered public key of an actor or a runner, read from storage; null when there is none. */
async function registeredKey(store: Store, id: Exclude<KeyId, { kind: "key" }>): Promise<string | null> {
  const record =
    id.kind === "actor"
      ? await store.actors.find({ id: id.id })
      : await store.runners.find({ context_id: id.contextId, id: id.id });
  return record?.pubkey ?? null;
}

/** Looks up the public key a keyid names: an actor's, a runner's, or the bare key itself. */
function keyResolver(store: Store, config: Config): (keyid: string) => Promise<CryptoKey | null> {
  return async (keyid) => {
    const parsed = parseKeyId(keyid);
    if (!parsed) return null;
    if (parsed.kind === "key") return importPublicKey(parsed.pubkey);
    return keyCache.get(
      store.keys.prefix,
      keyid,
      config.keyCacheSeconds,
      () => registeredKey(store, parsed),
      () => store.keyEpoch.read(),
    );
  };
}

/**
 * Verifies the request's signature and refuses replayed nonces, then puts the principal and the
 * raw body on the context. The body is read once here, checked against its digest, and only
 * then parsed by the route's validator (Hono reuses the bytes read here).
 */
export const authenticate: MiddlewareHandler<AppEnv> = async (c, next) => {
  const { store, config } = c.var;
  const ticket = c.req.query("ticket");
  if (ticket !== undefined && !c.req.header("signature")) {
    // A ticket stands for a signature on a WebSocket handshake of a stream or of /rpc, nowhere else.
    const upgrade = c.req.header("upgrade")?.toLowerCase() === "websocket";
    if (!upgrade || c.req.method !== "GET" || !TICKET_PATHS.test(c.req.path)) {
      throw new Problem(
        "ticket-invalid",
        "a ticket opens only a WebSocket (GET with Upgrade: websocket) on an event stream or /rpc; sign other requests",
      );
    }
    c.set("principal", await redeemTicket(store, ticket));
    c.set("body", new Uint8Array());
    await next();
    return;
  }
  const body = await readBody(c.req);
  const now = Math.floor(Date.now() / 1000);
  let verified;
  try {
    verified = await verifyRequest(c.req.raw, {
      body,
      now,
      skewSeconds: config.skewSeconds,
      resolveKey: keyResolver(store, config),
    });
  } catch (error) {
    throw error instanceof AuthError ? unauthorized(error) : error;
  }
  await refuseIfBeforeReset(store, verified.created);
  const principal = parseKeyId(verified.keyid) as Principal;
  // A nonce must be remembered as long as a signature carrying it could still be fresh.
  const ttlSeconds = 2 * config.skewSeconds + 60;
  if (DEFERRED_NONCE.test(c.req.path) || BATCHED_REPORTS.test(c.req.path)) {
    // Runner webhooks take reports from runners only: anyone else is refused before the body is read.
    if (principal.kind !== "runner") {
      throw new Problem("forbidden", `only runners report on jobs; this request is signed as ${verified.keyid}`, {
        needed: ["runner"],
      });
    }
    c.set("deferredNonce", { keyid: verified.keyid, value: verified.nonce, ttlMs: ttlSeconds * 1000 });
    c.set("principal", principal);
    c.set("body", body);
    await next();
    return;
  }
  if (c.req.method === "POST" && SUBMISSION.test(c.req.path) && principal.kind === "actor") {
    c.set("deferredNonce", { keyid: verified.keyid, value: verified.nonce, ttlMs: ttlSeconds * 1000 });
    c.set("principal", principal);
    c.set("body", body);
    await next();
    return;
  }
  const fresh = await store.nonces.claim(
    verified.keyid,
    verified.nonce,
    principal.kind === "runner" ? principal.contextId : undefined,
    ttlSeconds,
  );
  if (!fresh) throw nonceReplayed();
  c.set("principal", principal);
  c.set("body", body);
  await next();
};

/**
 * The request's body, read once: at most `SIZE_LIMITS.requestBody` bytes, refused by its declared
 * length before anything is read, or as soon as a body without one grows past it (413).
 */
async function readBody(request: HonoRequest): Promise<Uint8Array<ArrayBuffer>> {
  const body = await readBoundedBody(request.raw, SIZE_LIMITS.requestBody);
  // Hono's validators read the body again: they find it in its cache (a raw body reads once).
  if (body) {
    (request.bodyCache as Record<string, unknown>).arrayBuffer = Promise.resolve(body.buffer);
    return body;
  }
  throw new Problem(
    "request-too-large",
    `the body is larger than ${formatBytes(SIZE_LIMITS.requestBody)}, the most a request may carry (docs/limits.md)`,
    { field: "body", limit: SIZE_LIMITS.requestBody },
  );
}

/**
 * A WebSocket handshake from a browser, which cannot sign it: the single-use ticket a signed
 * request obtained (POST /v1/tickets) stands for the signature. The signer's key is looked up
 * again, so a ticket of an actor or runner removed meanwhile opens nothing.
 */
async function redeemTicket(store: Store, ticket: string): Promise<Principal> {
  const keyid = await store.tickets.redeem(ticket);
  const principal = keyid ? parseKeyId(keyid) : null;
  // Read from storage, not the isolate's key cache: a signer removed meanwhile opens nothing.
  if (!principal || principal.kind === "key" || !(await registeredKey(store, principal))) {
    throw new Problem(
      "ticket-invalid",
      "this ticket is unknown, already used or expired: ask POST /v1/tickets for a new one",
    );
  }
  return principal;
}
