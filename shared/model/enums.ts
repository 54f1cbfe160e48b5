import { z } from "zod";

/**
 * The model's enums, with one documented extension: `sh` in ScriptType and RunnerType,
 * so the reference runner can run shell scripts next to python.
 */

/** Language or runtime of a job's script; also names its local queue (`queue:<suffix>`). */
export const ScriptType = z.enum(["osis", "sal", "v", "python", "sh"]);
export type ScriptType = z.infer<typeof ScriptType>;

/** The model's `queue_suffix()`: the list a `local` runner takes jobs of this type from. */
export function queueSuffix(scriptType: ScriptType): string {
  return scriptType;
}

/** The runtime a runner implements. */
export const RunnerType = z.enum(["v", "python", "osis", "rust", "sh"]);
export type RunnerType = z.infer<typeof RunnerType>;

/**
 * Job lifecycle: dispatched → waiting_for_prerequisites → started → finished | error | skipped.
 * `skipped` (an extension) is a job that did not run by its flow's rules: its `when` was false,
 * its `needs` could no longer be met, or its wait timed out with `on_timeout: skip`.
 */
export const JobStatus = z.enum(["dispatched", "waiting_for_prerequisites", "started", "error", "finished", "skipped"]);
export type JobStatus = z.infer<typeof JobStatus>;

/**
 * Flow lifecycle: dispatched → started → finished | error. A flow whose jobs declare
 * compensations (`compensate:`) that fails, or is cancelled with `compensate: true`, unwinds
 * instead of ending in error: started → compensating → compensated | compensation_failed
 * (docs/flows.md, "Compensation").
 */
export const FlowStatus = z.enum([
  "dispatched",
  "started",
  "error",
  "finished",
  "compensating",
  "compensated",
  "compensation_failed",
]);
export type FlowStatus = z.infer<typeof FlowStatus>;

/** How a message is interpreted. */
export const MessageType = z.enum(["job", "chat", "mail"]);
export type MessageType = z.infer<typeof MessageType>;

/** Rendering hint for a message body. */
export const MessageFormatType = z.enum(["html", "text", "md"]);
export type MessageFormatType = z.infer<typeof MessageFormatType>;

/** Message lifecycle: dispatched → acknowledged → processed | error. */
export const MessageStatus = z.enum(["dispatched", "acknowledged", "error", "processed"]);
export type MessageStatus = z.infer<typeof MessageStatus>;
