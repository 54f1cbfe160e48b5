import { z } from "zod";
import { ResultMap } from "./common.js";
import { EventName } from "./job.js";
import { formatBytes, jsonBytes, SIZE_LIMITS } from "./limits.js";

/** How many waits one event resumes at most (more on one name and key: send again, a new id). */
export const EVENT_LIMITS = {
  waitsPerEvent: 1000,
  /** The longest a context keeps events for waits that start later (`event_lookback`): a day. */
  lookbackSeconds: 86_400,
  /** Events kept per name and key within the lookback (the oldest are dropped past it). */
  keptPerKey: 100,
  /** How long an event's id is remembered, so the same id again is the same event: a day. */
  idSeconds: 86_400,
} as const;

/** A context's `event_lookback`: seconds an event is kept for waits that start after it. */
export const EventLookback = z
  .int()
  .min(1)
  .max(EVENT_LIMITS.lookbackSeconds)
  .describe(
    `Seconds an event is kept for waits that start after it came (1 to ${EVENT_LIMITS.lookbackSeconds}; unset: none is kept).`,
  );

/**
 * `POST /v1/contexts/{id}/events`: an event for the context's waits. Every wait with this `name`
 * whose key is `key` ends finished, with `data` as its result (and `event_id`). `id` makes it
 * idempotent: the same id again (within a day) is the same event, delivered again to the waits
 * it matched the first time; without one, each send is a new event.
 */
export const EventInput = z
  .object({
    id: z
      .string()
      .regex(/^[A-Za-z0-9_.:-]{1,128}$/, "an event id: letters, digits and _ . : -, at most 128")
      .optional(),
    name: EventName,
    key: z.string().max(256).default(""),
    data: ResultMap.default({}).refine((data) => jsonBytes(data) <= SIZE_LIMITS.result, {
      message: `an event's data is at most ${formatBytes(SIZE_LIMITS.result)} as JSON (it becomes a result)`,
    }),
  })
  .strict()
  .meta({ id: "EventInput" });
export type EventInput = z.output<typeof EventInput>;

/**
 * The answer to an event: its id, whether it was sent before (`duplicate`), how many waits it
 * matched and how many of them it resumed now (a wait that already ended, by this event sent
 * before, by another, or by its timeout, is matched but not resumed), and whether more waits
 * than one event resumes were waiting (`more`).
 */
export const EventSent = z
  .object({
    id: z.string(),
    duplicate: z.boolean(),
    matched: z.int().min(0),
    resumed: z.int().min(0),
    more: z.boolean().optional(),
  })
  .strict()
  .meta({ id: "EventSent" });
export type EventSent = z.infer<typeof EventSent>;
