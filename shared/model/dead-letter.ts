import { z } from "zod";
import { Id, Timestamp } from "./common.js";

/**
 * Something the coordinator gave up on, kept in the context's dead letters with the reason and
 * how often it was tried: a job out of retries, a message no runner took (undeliverable), a
 * runner's report that could not be read (payload), a message between actors that was refused.
 */
export const DeadLetter = z
  .object({
    id: z.string(),
    kind: z.enum(["job", "undeliverable", "payload", "message"]),
    context_id: Id,
    flow_id: z.int().min(0),
    job_id: Id.optional(),
    job_key: z.string().optional(),
    caller_id: Id.optional(),
    message_id: Id.optional(),
    attempts: z.int().min(0),
    reason: z.string(),
    /** For a payload: the first KiB of what arrived. */
    payload: z.string().optional(),
    at: Timestamp,
  })
  .strict()
  .meta({ id: "DeadLetter" });
export type DeadLetter = z.infer<typeof DeadLetter>;
