import type { Message } from "../../shared/model/index.js";
import { coordinatorKeys } from "../coordinator-key.js";
import { MessageOwners } from "../flow/owners.js";
import { relay } from "../flow/relay.js";
import type { FlowCall } from "./flows.js";

/**
 * Relays a context's msg_out after the answer is sent (the request's waitUntil): what `own`
 * holds, and whatever else waits there (job messages go to runners through their flows' owners).
 * The supervisor's sweep relays what this misses.
 */
export function relayLater(call: FlowCall, contextId: number, own: Map<string, Message> = new Map()): void {
  call.later(
    (async () => {
      const owners = new MessageOwners(call.env, { prefix: call.store.keys.prefix, contextId, flowId: 0, origin: call.origin }, undefined);
      await relay(
        {
          store: call.store,
          key: (await coordinatorKeys(call.env)).current,
          runners: async (ctx) => (await call.store.runners.list({ context_id: ctx }, 0, 500)).items,
          owner: (m) => owners.for(m),
        },
        contextId,
        Math.max(own.size, 50),
        own,
      );
    })().catch((error: unknown) => console.warn(`relaying in context ${contextId} failed: ${(error as Error).message}`)),
  );
}
