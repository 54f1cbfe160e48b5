import type { Store } from "../../shared/store/index.js";
import type { CoordinatorKey } from "../core/coordinator-key.js";
import { deliverToActor } from "./actor-delivery.js";

/** Deliveries to inboxes are quick; one that has not settled in this long never will. */
const SETTLE_WITHIN_MS = 30_000;

/**
 * Moves messages between actors (chat, mail) from the context's msg_out into their recipients'
 * inboxes, and POSTs them to the recipients' https addresses. A flow's result is on msg_out only
 * when its caller had https addresses: the commit that ended the flow put it in the inbox, so it
 * is only POSTed. Taking from msg_out into the in-flight set is one step, so a relay that
 * dies loses nothing: the next claim after the settle deadline puts what it held back. Resolves
 * with how many messages it took.
 */
export async function relayMail(
  store: Store,
  key: CoordinatorKey,
  contextId: number,
  max: number,
): Promise<{ taken: number }> {
  // The sub-millisecond part makes the claim's score its own, so a late settle can tell.
  const settleBy = Date.now() + SETTLE_WITHIN_MS + Math.random();
  const keys = await store.flows.claim(contextId, max, settleBy);
  if (keys.length === 0) return { taken: 0 };
  const loaded = await store.flows.loadMessages(keys);
  const settled: string[] = [];
  await Promise.all(
    keys.map(async (k, i) => {
      const message = loaded[i];
      if (message) await deliverToActor(store, key, message);
      settled.push(k); // a vanished message leaves the relay too
    }),
  );
  await store.flows.settle(contextId, { delivered: settled, back: [] }, settleBy);
  return { taken: keys.length };
}
