import type { Wake } from "../core/contracts.js";
import { wakeDispatcher } from "../core/stubs.js";
import type { FlowCall } from "./call.js";

/**
 * Wakes a context's dispatcher (new messages for actors, runners changed, dispatch resumed) and
 * waits until the wake is durable. Should the dispatcher be out of reach, the wake is owed by
 * the supervisor's sweep, which wakes it (for everything) within a minute; the caller's change
 * stands.
 */
export async function wakeContext(call: FlowCall, contextId: number, wake: Wake): Promise<void> {
  try {
    await wakeDispatcher(call.env, { prefix: call.store.keys.prefix, contextId, origin: call.origin }, wake);
  } catch (error) {
    console.warn(`waking the dispatcher of context ${contextId} failed: ${(error as Error).message}`);
    await call.store.sweep.oweWake(contextId);
  }
}
