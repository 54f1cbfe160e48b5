import { z } from "zod";

/** Longest a retention window may be: ten years, in seconds. */
const MAX_WINDOW = 315_360_000;

const Window = (what: string) => z.int().min(1).max(MAX_WINDOW).describe(`Seconds ${what} (1 to ${MAX_WINDOW}).`);

/** Most dead letters a context may keep (the oldest are dropped past it). */
export const DeadLettersMax = z
  .int()
  .min(1)
  .max(1_000_000)
  .describe("The most dead letters the context keeps; past it the oldest are dropped first (counted in /metrics).");

/**
 * A context's retention policy, every part optional: what a context sets overrides the
 * deployment's defaults (wrangler.toml `RETENTION_*`, `DEAD_LETTERS_MAX`) one part at a time.
 */
export const RetentionPolicy = z
  .object({
    finished_seconds: Window("a flow (or a job outside any flow) that finished is kept after its end").optional(),
    error_seconds: Window("a flow (or a job outside any flow) that ended in error is kept after its end").optional(),
    inbox_seconds: Window("a message stays in an inbox unread (read ones are removed as they are read)").optional(),
    dead_letters: DeadLettersMax.optional(),
  })
  .strict()
  .meta({ id: "RetentionPolicy" });
export type RetentionPolicy = z.infer<typeof RetentionPolicy>;

/** The policy in force in a context: its own settings over the deployment's defaults. */
export const EffectiveRetention = z
  .object({
    finished_seconds: z.int(),
    error_seconds: z.int(),
    inbox_seconds: z.int(),
    dead_letters: z.int(),
    /** Which parts the context sets itself (the others are the deployment's defaults). */
    overridden: z.array(z.enum(["finished_seconds", "error_seconds", "inbox_seconds", "dead_letters"])),
  })
  .strict()
  .meta({ id: "EffectiveRetention" });
export type EffectiveRetention = z.infer<typeof EffectiveRetention>;

/** `PUT /v1/contexts/{id}/retention`: a number sets a part, null goes back to the default, an absent one stays. */
export const RetentionUpdate = z
  .object({
    finished_seconds: RetentionPolicy.shape.finished_seconds.unwrap().nullable().optional(),
    error_seconds: RetentionPolicy.shape.error_seconds.unwrap().nullable().optional(),
    inbox_seconds: RetentionPolicy.shape.inbox_seconds.unwrap().nullable().optional(),
    dead_letters: DeadLettersMax.nullable().optional(),
  })
  .strict()
  .meta({ id: "RetentionUpdate" });
export type RetentionUpdate = z.infer<typeof RetentionUpdate>;

/** What a context holds in storage, counted from its indexes (GET /v1/contexts/{id}). */
export const ContextStored = z
  .object({
    flows: z
      .object({
        dispatched: z.int(),
        started: z.int(),
        finished: z.int(),
        error: z.int(),
        compensating: z.int(),
        compensated: z.int(),
        compensation_failed: z.int(),
      })
      .strict(),
    /** Ended flows and jobs outside flows waiting for their retention window to pass, by how they ended. */
    ended: z.object({ finished: z.int(), error: z.int() }).strict(),
    jobs: z.int(),
    messages: z.int(),
    unread_inbox: z.int(),
    dead_letters: z.int(),
    runners: z.int(),
    schedules: z.int(),
  })
  .strict()
  .meta({ id: "ContextStored" });
export type ContextStored = z.infer<typeof ContextStored>;
