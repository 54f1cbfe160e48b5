import type * as WorkerModule from "./index.js";

/**
 * The Worker's bindings (wrangler.toml `[vars]`, secrets, Durable Objects). Every one is listed
 * with its meaning in the README's configuration table.
 */
export interface Env {
  /** Upstash (or local REST endpoint) URL. Secret. */
  UPSTASH_REDIS_REST_URL: string;
  /** Bearer token for that endpoint. Secret. */
  UPSTASH_REDIS_REST_TOKEN: string;
  /** Prefix in front of every Redis key, to share one database between deployments. */
  KEY_PREFIX?: string;
  /** Deadline for one storage request, in milliseconds (default 5000). */
  REDIS_TIMEOUT_MS?: string;
}

/* eslint-disable @typescript-eslint/no-namespace, @typescript-eslint/no-empty-object-type --
   the runtime's types are a namespace of interfaces meant to be merged into, not module syntax. */
declare global {
  namespace Cloudflare {
    // Types `env` from "cloudflare:workers" and the test integration with our bindings.
    interface Env extends WorkerEnv {}
    interface GlobalProps {
      mainModule: typeof WorkerModule;
    }
  }
}
/* eslint-enable @typescript-eslint/no-namespace, @typescript-eslint/no-empty-object-type */

type WorkerEnv = Env;
