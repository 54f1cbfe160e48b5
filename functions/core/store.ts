import { Keys } from "../../shared/keys.js";
import { connectStore, type Store } from "../../shared/store/index.js";
import { declareCluster } from "./cluster.js";
import { readDeadLettersMax } from "./config.js";
import type { Env } from "./env.js";
import { Problem } from "./problem.js";

let cached: { env: Env; prefix: string; signature: string; store: Store } | undefined;

/**
 * The Store for these bindings. An isolate serves many requests with the same bindings, so the
 * client (and its loaded-script cache) is kept between them.
 */
export function storeFor(env: Env): Store {
  return storeWith(env, env.KEY_PREFIX ?? "");
}

/** The Store of a deployment whose key prefix is `prefix` (a Durable Object serves one). */
export function storeForPrefix(env: Env, prefix: string): Store {
  return storeWith(env, prefix);
}

function storeWith(env: Env, prefix: string): Store {
  // The same bindings ask again and again (a Durable Object's env, an isolate's): known at a
  // glance, without reading every binding (a measurable part of the Worker's CPU per job).
  if (cached?.env === env && cached.prefix === prefix) return cached.store;
  if (!env.UPSTASH_REDIS_REST_URL || !env.UPSTASH_REDIS_REST_TOKEN) {
    throw new Problem("storage-not-configured", "set the UPSTASH_REDIS_REST_URL and UPSTASH_REDIS_REST_TOKEN secrets");
  }
  const signature = [
    env.UPSTASH_REDIS_REST_URL,
    env.UPSTASH_REDIS_REST_TOKEN,
    prefix,
    env.REDIS_TIMEOUT_MS ?? "",
    env.DEAD_LETTERS_MAX ?? "",
    env.STORAGE_CLUSTER ?? "",
  ].join("\n");
  if (cached?.signature === signature) {
    cached = { ...cached, env, prefix };
    return cached.store;
  }
  const cluster = env.STORAGE_CLUSTER === "true";
  declareCluster(cluster);
  const timeoutMs = Number(env.REDIS_TIMEOUT_MS) > 0 ? Number(env.REDIS_TIMEOUT_MS) : undefined;
  const store = connectStore(
    { url: env.UPSTASH_REDIS_REST_URL, token: env.UPSTASH_REDIS_REST_TOKEN, ...(timeoutMs ? { timeoutMs } : {}) },
    new Keys(prefix, { cluster }),
    undefined,
    { deadLetters: readDeadLettersMax(env) },
  );
  cached = { env, prefix, signature, store };
  return store;
}

/**
 * The scope a Durable Object serves: the one stored with it, else the first one it was called
 * with, stored now. A fresh instance (after eviction) that is woken by its alarm reads it back.
 */
export async function bindScope<S>(storage: DurableObjectStorage, given: S): Promise<S> {
  const stored = await storage.get<S>("scope");
  if (stored !== undefined) return stored;
  await storage.put("scope", given);
  return given;
}
