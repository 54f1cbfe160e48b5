import { z } from "zod";
import { Id, Log, Seconds, Timestamp } from "./common.js";
import { MessageFormatType, MessageStatus, MessageType } from "./enums.js";
import { RunnerJob } from "./job.js";

/**
 * The transport unit: a job request, a chat line or a mail, with its timeouts and logs.
 * Extensions beyond the seeds: `attempt` (of the embedded job), `runner_id` (who ran it),
 * `trace_id` (W3C traceparent trace id), `ended_at`.
 */
export const Message = z
  .object({
    id: Id,
    caller_id: Id,
    context_id: Id,
    message: z.string(),
    message_type: MessageType,
    message_format_type: MessageFormatType,
    timeout: Seconds,
    timeout_ack: Seconds,
    timeout_result: Seconds,
    job: z.array(RunnerJob),
    logs: z.array(Log),
    created_at: Timestamp,
    updated_at: Timestamp,
    status: MessageStatus,
    attempt: z.int().min(1).optional(),
    runner_id: Id.optional(),
    trace_id: z.string().max(64).optional(),
    ended_at: Timestamp.optional(),
  })
  .strict();
export type Message = z.infer<typeof Message>;
