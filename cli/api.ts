import { z } from "zod";
import type { CoordinatorClient } from "../shared/client/index.js";

/**
 * The message routes, over the typed client's generic `request`, parsed with a lenient schema of
 * what the CLI prints rather than the shared model: the message model is still growing, and an
 * older CLI should keep reading a newer coordinator's inbox.
 */

/** The part of a job record the CLI needs to find its attempts' messages. */
const JobRecord = z.looseObject({ id: z.number(), message_base: z.number().optional() });

/** The part of a message the CLI prints: a job's logs, or an inbox entry. */
export const MessageText = z.looseObject({
  id: z.number(),
  caller_id: z.number(),
  message: z.string(),
  message_type: z.string(),
  message_format_type: z.string(),
  created_at: z.number(),
  status: z.string(),
  subject: z.string().optional(),
  to: z.number().optional(),
  logs: z.array(z.looseObject({ stream: z.string(), message: z.string() })).default([]),
  flow_result: z
    .looseObject({
      flow_id: z.number(),
      job_id: z.number().optional(),
      status: z.string(),
      result: z.record(z.string(), z.record(z.string(), z.string())).default({}),
      error: z.looseObject({ job: z.number(), name: z.string().optional(), reason: z.string() }).optional(),
    })
    .optional(),
});
export type MessageText = z.infer<typeof MessageText>;

/**
 * The last `count` stderr lines of one attempt of a job: what a failed script said about why.
 * An attempt's message is `message_base + attempt - 1` (see RunnerJob). Undefined when any of it
 * cannot be read: this only adds detail to an error that is shown anyway.
 */
export async function attemptStderr(
  client: CoordinatorClient,
  scope: { contextId: number; callerId: number; jobId: number; attempt: number },
  count = 3,
): Promise<string[] | undefined> {
  try {
    const { contextId, callerId, jobId, attempt } = scope;
    const job = JobRecord.parse(await client.request("GET", `/v1/contexts/${contextId}/jobs/${callerId}/${jobId}`));
    if (job.message_base === undefined || attempt < 1) return undefined;
    const messageId = job.message_base + attempt - 1;
    const message = MessageText.parse(
      await client.request("GET", `/v1/contexts/${contextId}/messages/${callerId}/${messageId}`),
    );
    const lines = message.logs.filter((l) => l.stream === "stderr").map((l) => l.message);
    return lines.slice(-count);
  } catch {
    return undefined;
  }
}

/** `GET /v1/contexts/{c}/inbox?max&pop`: the caller's messages, oldest first. */
export async function readInbox(
  client: CoordinatorClient,
  contextId: number,
  max: number,
  pop: boolean,
): Promise<MessageText[]> {
  const answer = z
    .object({ messages: z.array(MessageText) })
    .parse(await client.request("GET", `/v1/contexts/${contextId}/inbox?max=${max}&pop=${pop}`));
  return answer.messages;
}

/** What `POST /v1/contexts/{c}/messages` takes. */
export interface MessageInput {
  to: number;
  message_type: "chat" | "mail";
  message_format_type: "text" | "md" | "html";
  subject?: string;
  message: string;
}

/** `POST /v1/contexts/{c}/messages`: sends a chat line or a mail; answers the stored message. */
export async function sendMessage(
  client: CoordinatorClient,
  contextId: number,
  input: MessageInput,
): Promise<MessageText> {
  return MessageText.parse(await client.request("POST", `/v1/contexts/${contextId}/messages`, input));
}
