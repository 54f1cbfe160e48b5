import type { z } from "zod";
import { isMember } from "../../shared/auth/index.js";
import type { Message, MessageSubmission } from "../../shared/model/index.js";
import { MESSAGE_TIMEOUTS } from "../../shared/flow/index.js";
import { fieldProblem } from "../core/errors.js";
import { contextFor, requireActor } from "./access.js";
import type { FlowCall } from "./call.js";
import { wakeContext } from "./wake.js";

const MAX_INBOX_READ = 100;

/**
 * Sends a chat line or a mail to another member of the context (any member may): stored and put
 * on msg_out in one step, then the context's dispatcher relays it into the recipient's inbox.
 * Permissions are checked again when it is relayed.
 */
export async function sendMessage(
  call: FlowCall,
  contextId: number,
  input: z.output<typeof MessageSubmission>,
): Promise<Message> {
  const sender = requireActor(call);
  const context = await contextFor(call, contextId, "read");
  if (!isMember(context, input.to)) {
    throw fieldProblem([{ field: "body.to", message: `actor ${input.to} is not a member of context ${contextId}` }]);
  }
  const now = call.store.now();
  const message: Message = {
    id: await call.store.messages.allocateIds(contextId, sender),
    caller_id: sender,
    context_id: contextId,
    message: input.message,
    message_type: input.message_type,
    message_format_type: input.message_format_type,
    timeout: MESSAGE_TIMEOUTS.timeout,
    timeout_ack: MESSAGE_TIMEOUTS.timeout_ack,
    timeout_result: MESSAGE_TIMEOUTS.timeout_ack,
    job: [],
    logs: [],
    created_at: now,
    updated_at: now,
    status: "dispatched",
    to: input.to,
    ...(input.subject !== undefined ? { subject: input.subject } : {}),
  };
  await call.store.messages.post(message);
  await wakeContext(call, contextId, { mail: true });
  return message;
}

/** The caller's oldest messages in a context; `pop` takes them off the inbox (marks them processed). */
export async function inbox(call: FlowCall, contextId: number, max: number, pop: boolean): Promise<Message[]> {
  const actor = requireActor(call);
  await contextFor(call, contextId, "read");
  const messages = await call.store.messages.inbox(contextId, actor, Math.min(max, MAX_INBOX_READ), pop);
  // A flow's result mail keeps no results of its own: they are read from its jobs now.
  return call.store.results.fill(messages);
}
