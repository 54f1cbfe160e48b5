import { isMember, signRequest } from "../../shared/auth/index.js";
import { deadLetterIds } from "../../shared/keys.js";
import type { Message } from "../../shared/model/index.js";
import type { Store } from "../../shared/store/index.js";
import type { CoordinatorKey } from "../core/coordinator-key.js";

const NOTIFY_TIMEOUT_MS = 5_000;
const NOTIFY_ATTEMPTS = 3;

/**
 * A flow's result, which the commit ending the flow put in its caller's inbox itself: on msg_out
 * only to be POSTed.
 */
export function alreadyInInbox(message: Message): boolean {
  return message.flow_result !== undefined;
}

/**
 * Hands a message between actors to its recipient, as the model's supervisor does before it
 * releases a message: chat and mail only between members of the context (checked again now,
 * since permissions may have changed since it was sent). The message goes into the recipient's
 * inbox (`msg_in:<actor>`) exactly once, and is then POSTed, signed by the coordinator, to each
 * of the recipient's https addresses (best effort: the inbox is where it is kept). A flow's
 * result is in the inbox already (alreadyInInbox): it is only POSTed, and since its in-flight
 * entry goes only after that (relayMail's settle), a relay that dies first leaves it to be
 * POSTed again: at least once.
 */
export async function deliverToActor(
  store: Store,
  key: CoordinatorKey,
  message: Message,
): Promise<"delivered" | "posted" | "refused" | "settled-before"> {
  const recipient = message.to ?? message.caller_id;
  if (alreadyInInbox(message)) {
    await postToAddresses(store, key, recipient, message);
    return "posted";
  }
  const context = await store.contexts.find({ id: message.context_id });
  const reason = !context
    ? "the context no longer exists"
    : !isMember(context, message.caller_id)
      ? `sender ${message.caller_id} is no longer a member of context ${message.context_id}`
      : !isMember(context, recipient)
        ? `recipient ${recipient} is not a member of context ${message.context_id}`
        : undefined;
  if (reason) {
    if (await store.messages.settle(message, { deliver: false, reason })) {
      await store.deadLetters.add({
        id: deadLetterIds.message(message.caller_id, message.id),
        kind: "message",
        context_id: message.context_id,
        flow_id: 0,
        caller_id: message.caller_id,
        message_id: message.id,
        attempts: 1,
        reason,
        at: store.now(),
      });
    }
    return "refused";
  }
  if (!(await store.messages.settle(message, { deliver: true }))) return "settled-before";
  // The sweep looks at the context within a minute, and from then on by its inbox window: what
  // comes into an inbox is removed unread after it even in a context that runs no flows.
  await store.sweep.dueSoon(message.context_id);
  await postToAddresses(store, key, recipient, { ...message, status: "acknowledged" });
  return "delivered";
}

/**
 * POSTs a message to each of the recipient's https addresses, as they are now; a flow's result
 * mail with the results read from its jobs (it keeps none of its own).
 */
async function postToAddresses(store: Store, key: CoordinatorKey, recipient: number, message: Message): Promise<void> {
  const actor = await store.actors.find({ id: recipient });
  const urls = (actor?.address ?? []).flatMap((a) => (a.type === "https" ? [a.url] : []));
  if (urls.length === 0) return;
  const [told] = await store.results.fill([message]);
  for (const url of urls) await notify(url, told ?? message, key);
}

async function notify(url: string, message: Message, key: CoordinatorKey): Promise<void> {
  for (let attempt = 0; attempt < NOTIFY_ATTEMPTS; attempt++) {
    try {
      const request = new Request(url, {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: JSON.stringify({ message }),
      });
      const response = await fetch(await signRequest(request, { keyid: key.kid, key: key.key }), {
        signal: AbortSignal.timeout(NOTIFY_TIMEOUT_MS),
      });
      await response.body?.cancel();
      if (response.ok || (response.status >= 400 && response.status < 500 && response.status !== 429)) return;
    } catch {
      // network trouble: try again
    }
    await new Promise((r) => setTimeout(r, 200 * 2 ** attempt));
  }
}
