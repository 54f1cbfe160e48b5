import { EpochCache } from "../core/epoch-cache.js";
import type { ServiceCall } from "./call.js";

/*
 * Whether a flow's caller has https addresses, as the submitting isolate knows it: what the
 * flow's coordinator is told at creation (CreateFlowInput.notifyHttps), so that the commit which
 * ends the flow puts its result in the caller's inbox and leaves it for the relay (to POST it)
 * only when there is somewhere to POST it. A caller without one then costs no storage command
 * at all for hearing how its flow ended.
 *
 * Kept per isolate under the revocation epoch (epoch-cache.ts): a change of addresses bumps it
 * (updateActor), so every isolate sees the change within REVOCATION_CHECK_MS (a second), this
 * one at once. Cost: one read of the actor per isolate, caller and KEY_CACHE_SECONDS, none per
 * flow.
 */
const known = new EpochCache<boolean>();

/**
 * True when actor `callerId` has an https address (or cannot be found: the relay then looks
 * again when the result is ready). Reads the actor only when this isolate does not know it.
 */
export async function callerHasHttps(call: Pick<ServiceCall, "store" | "config">, callerId: number): Promise<boolean> {
  const https = await known.get(call.store, call.config.keyCacheSeconds, callerId, async () => {
    const actor = await call.store.actors.find({ id: callerId });
    return actor ? actor.address.some((a) => a.type === "https") : undefined;
  });
  return https ?? true;
}

/** Forgets what this isolate knows of an actor's addresses (they just changed here). */
export function forgetAddresses(prefix: string, actorId: number): void {
  known.forget(prefix, actorId);
}
