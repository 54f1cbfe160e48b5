import type { FlowEvent, FlowState, Transition } from "../../shared/flow/index.js";
import { parseWorkItem } from "../../shared/keys.js";
import type { Message } from "../../shared/model/index.js";
import { readyQueueOf, type Store } from "../../shared/store/index.js";
import type { DeliverAnswer, DeliveryTarget } from "../core/contracts.js";
import type { CoordinatorKey } from "../core/coordinator-key.js";
import { jobUrl, type FlowScope } from "../core/scopes.js";
import { deliver, deliveryPayload } from "./delivery.js";

/** What a delivery needs from the FlowCoordinator that owns the attempt. */
export interface AttemptOwner {
  scope: FlowScope;
  state(): FlowState;
  enqueue(event: FlowEvent): Promise<Transition>;
  store(): Store;
  signingKey(): Promise<CoordinatorKey>;
}

/**
 * Messages this object created and has not delivered yet, so a delivery need not read them back
 * from Redis. A cache: after eviction a delivery reads its message from storage.
 */
export class OutgoingMessages {
  private readonly byKey = new Map<string, Message>();

  remember(keyOf: (m: Message) => string, messages: Message[]): void {
    for (const m of messages) if (m.message_type === "job") this.byKey.set(keyOf(m), m);
  }

  async take(store: Store, key: string): Promise<Message | null> {
    const cached = this.byKey.get(key);
    if (cached) return cached;
    const [loaded] = await store.flows.loadMessages([key]);
    return loaded ?? null;
  }

  forget(key: string): void {
    this.byKey.delete(key);
  }

  /** Forgets every message: another flow under the same id numbers its messages anew. */
  clear(): void {
    this.byKey.clear();
  }
}

/**
 * Delivers one claimed attempt to the runner its slot was claimed at: records the assignment
 * (so reports from that runner are accepted from the first), POSTs it to a push runner (a 2xx is
 * the acknowledgement) or hands it to the lease of a pull runner, and records the outcome.
 * Asked again for the same runner (a reaped claim), it delivers again only if it never learned
 * how the first try ended; asked about an attempt that moved on, it answers `gone`.
 */
export async function deliverAttempt(
  owner: AttemptOwner,
  outgoing: OutgoingMessages,
  item: string,
  runner: DeliveryTarget,
): Promise<DeliverAnswer> {
  const work = parseWorkItem(item);
  if (!work) return { outcome: "gone", reason: `not a work item: ${item}` };
  const base = { job: work.jobId, attempt: work.attempt, runner: runner.id };
  const assigned = await owner.enqueue({ type: "assigned", ...base, at: Date.now() });
  const job = owner.state().jobs[work.jobId];
  if (assigned.outcome === "duplicate" && job?.delivery?.state !== "assigned") {
    return { outcome: "delivered" }; // delivered before; its outcome is known
  }
  if (!job || (assigned.outcome !== "applied" && assigned.outcome !== "duplicate")) {
    outgoing.forget(work.messageKey);
    return { outcome: "gone", reason: assigned.reason ?? "the attempt no longer wants a runner" };
  }
  const message = await outgoing.take(owner.store(), work.messageKey);
  if (!message) {
    await owner.enqueue({ type: "unassigned", ...base, at: Date.now() });
    return { outcome: "gone", reason: `message ${work.messageKey} is gone` };
  }
  const payload = deliveryPayload(message, runner.id, jobUrl(owner.scope.origin, owner.scope, work.jobId));
  if (runner.address === "") {
    await owner.enqueue({ type: "delivered", ...base, acknowledged: false, at: Date.now() });
    outgoing.forget(work.messageKey);
    return { outcome: "delivered", payload };
  }
  const sent = await deliver(runner.address, payload, await owner.signingKey());
  if (sent.delivered) {
    await owner.enqueue({ type: "delivered", ...base, acknowledged: true, at: Date.now() });
    outgoing.forget(work.messageKey);
    return { outcome: "delivered" };
  }
  await owner.enqueue({ type: "unassigned", ...base, reason: sent.reason, at: Date.now() });
  return {
    outcome: "refused",
    reason: sent.reason,
    queue: readyQueueOf(owner.store().keys, owner.state(), job.spec),
  };
}
