import { createExecutionContext, waitOnExecutionContext } from "cloudflare:test";
import { env } from "cloudflare:workers";
import worker from "../../functions/index.js";
import type { Env } from "../../functions/env.js";
import { actorKeyId, generateKeyPair, type PrivateJwk } from "../../shared/auth/index.js";
import { CoordinatorClient, signerFromJwk } from "../../shared/client/index.js";
import type { Actor } from "../../shared/model/index.js";
import { connectRedis } from "../../shared/store/index.js";
import { deletePrefix, freshPrefix } from "../support/prefix.js";

/** The base URL tests address the Worker by; it never leaves the isolate. */
export const BASE = "http://coordinator.test";

/**
 * The real Worker (inside workerd, storage through the REST endpoint) under a key prefix of this
 * test file's own, so files never see each other's actors or contexts.
 */
export function testWorker(label: string, overrides: Partial<Env> = {}) {
  const prefix = freshPrefix(label);
  const workerEnv: Env = { ...env, KEY_PREFIX: prefix, ...overrides };
  const fetch = async (request: Request): Promise<Response> => {
    const ctx = createExecutionContext();
    const response = await worker.fetch(request as Request<unknown, IncomingRequestCfProperties>, workerEnv, ctx);
    await waitOnExecutionContext(ctx);
    return response;
  };
  const redis = connectRedis({ url: env.UPSTASH_REDIS_REST_URL, token: env.UPSTASH_REDIS_REST_TOKEN });
  const anonymous = new CoordinatorClient({ baseUrl: BASE, fetch });
  return {
    prefix,
    env: workerEnv,
    fetch,
    redis,
    anonymous,
    /** Registers a new actor and returns it with a client signing as it. */
    async newActor(input: { id?: number } = {}): Promise<{ actor: Actor; jwk: PrivateJwk; client: CoordinatorClient }> {
      const jwk = await generateKeyPair();
      const actor = await anonymous.registerActor(jwk, input);
      return { actor, jwk, client: anonymous.as(await signerFromJwk(jwk, actorKeyId(actor.id))) };
    },
    /** A client signing with `jwk` as `keyid`. */
    async clientFor(jwk: PrivateJwk, keyid: string): Promise<CoordinatorClient> {
      return anonymous.as(await signerFromJwk(jwk, keyid));
    },
    cleanup: () => deletePrefix(redis, prefix),
  };
}
