import { z } from "zod";
import { Id, Log, ResultMap, Seconds, Timestamp } from "./common.js";
import { FlowStatus, MessageFormatType, MessageStatus, MessageType } from "./enums.js";
import { FlowErrorInfo } from "./flow.js";
import { RunnerJob } from "./job.js";

/**
 * What a flow's result message carries: the flow's end as data. `result` (the results of the jobs
 * that had finished when it was written, by job key) is not stored in the message: it is read
 * from the jobs whenever the message is read from an inbox or POSTed, so a result is kept once
 * however it is told. It is absent once the flow itself was removed (retention, deletion).
 */
export const FlowResultInfo = z
  .object({
    flow_id: z.int().min(0),
    /** For a job run outside any flow: its id. */
    job_id: Id.optional(),
    status: FlowStatus,
    result: z.record(z.string(), ResultMap).optional(),
    error: FlowErrorInfo.optional(),
    /** The jobs that were skipped, by key, and why. */
    skipped: z.record(z.string(), z.string()).optional(),
  })
  .strict();

/**
 * The transport unit: a job request, a chat line or a mail, with its timeouts and logs.
 * Extensions beyond the model: `attempt` (of the embedded job), `runner_id` (who ran it),
 * `trace_id` (W3C traceparent trace id), `ended_at`; for messages between actors the
 * recipient `to` and a `subject`; for a flow's result message, `flow_result`.
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
    /** A retry prefers another runner than the one this attempt's predecessor failed on. */
    avoid_runner_id: Id.optional(),
    trace_id: z.string().max(64).optional(),
    ended_at: Timestamp.optional(),
    to: Id.optional(),
    subject: z.string().max(256).optional(),
    flow_result: FlowResultInfo.optional(),
  })
  .strict()
  .meta({ id: "Message" });
export type Message = z.infer<typeof Message>;
