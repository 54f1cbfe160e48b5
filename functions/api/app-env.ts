import type { MiddlewareHandler } from "hono";
import type { Store } from "../../shared/store/index.js";
import { readConfig, type Config } from "../core/config.js";
import type { Env } from "../core/env.js";
import { storeFor } from "../core/store.js";
import type { Principal, SignatureNonce } from "../core/principal.js";

/** What the signature check (`authenticate`) leaves on the context for routes. */
export interface AuthVariables {
  principal: Principal;
  /** The raw body the signature covered. */
  body: Uint8Array<ArrayBuffer>;
  /**
   * On runner webhooks and flow submissions: the nonce, left for the job's Durable Object or
   * the submission's reservation to spend.
   */
  deferredNonce?: SignatureNonce;
}

/** Variables routes read from the Hono context. */
export interface AppVariables extends Partial<AuthVariables> {
  store: Store;
  config: Config;
}

/** The Hono environment of every route: the Worker's bindings and the variables above. */
export interface AppEnv {
  Bindings: Env;
  Variables: AppVariables;
}

/** Puts the Store and the settings on the context for every route. */
export const withStore: MiddlewareHandler<AppEnv> = async (c, next) => {
  c.set("config", readConfig(c.env));
  c.set("store", storeFor(c.env));
  await next();
};
