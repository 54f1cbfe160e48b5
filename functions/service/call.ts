import type { Store } from "../../shared/store/index.js";
import type { Config } from "../core/config.js";
import type { Env } from "../core/env.js";
import type { Principal } from "../core/principal.js";
import { scopeFor, type FlowScope, type ScopeBase, type ScopeTarget } from "../core/scopes.js";

/**
 * Everything a service function gets besides its input: storage, settings, the verified caller,
 * and the signed request itself (a few operations check a second signature on it). REST routes
 * and JSON-RPC methods build the same call, so both go through the same checks.
 */
export interface ServiceCall {
  store: Store;
  config: Config;
  principal: Principal;
  request: Request;
  body: Uint8Array<ArrayBuffer>;
}

/** A service call that can reach the Durable Objects (flows, the context's dispatcher). */
export interface FlowCall extends ServiceCall {
  env: Env;
  /** The coordinator's public origin, for runner callbacks. */
  origin: string;
  /** Keeps work going after the answer is sent (the request's waitUntil). */
  later(work: Promise<unknown>): void;
}

/** What every scope of this call shares: the deployment's key prefix and the public origin. */
export function scopeBase(call: FlowCall): ScopeBase {
  return { prefix: call.store.keys.prefix, origin: call.origin };
}

/** The scope of a flow (or of a job outside any flow) in this call's deployment. */
export function callScope(call: FlowCall, contextId: number, target: ScopeTarget): FlowScope {
  return scopeFor(scopeBase(call), contextId, target);
}

/**
 * Work kept going after the answer (`later`), with its failure said in the log: a rejection
 * left to the runtime is logged as "Uncaught", as if the Worker had crashed, and says nothing of
 * what failed. The work itself is best effort (what must not be lost is never left to it).
 */
export function afterAnswer(
  waitUntil: (work: Promise<unknown>) => void,
  what = "work after the answer",
): (work: Promise<unknown>) => void {
  return (work) =>
    waitUntil(work.catch((error: unknown) => console.warn(`${what} failed: ${(error as Error).message}`)));
}
