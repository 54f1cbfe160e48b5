import { z } from "zod";
import { Id, Timestamp } from "./common.js";
import { EventLookback } from "./event.js";
import { ContextStored, EffectiveRetention, RetentionPolicy } from "./retention.js";

/** A permission list: actor ids. */
export const ActorIds = z.array(Id).max(10_000);

/** Most attempts the context's runners hold at once, across all its flows and runners. */
export const MaxInflight = z
  .int()
  .min(1)
  .max(1_000_000)
  .describe("The most job attempts the context's runners hold at once, across all its flows and runners.");
/** Most flow starts per minute in the context (a submission or start past it is answered 429). */
export const FlowStartsPerMinute = z
  .int()
  .min(1)
  .max(1_000_000)
  .describe(
    "The most flow starts a minute (all may come at once, then one every 60/n s); past it, 429 flow-starts-throttled with Retry-After.",
  );

/**
 * A tenant: its permission lists. Everything else of the context lives in its key namespace.
 * Extensions: `paused` (dispatch held: no runner is given work and no mail is relayed until
 * resumed) and its limits, `max_inflight` and `flow_starts_per_minute` (docs/dispatch.md),
 * `event_lookback` (how long events are kept for waits that start later, docs/flows.md), its
 * own `retention` settings, and `deleting_since` once its deletion has begun (it is then gone for
 * every caller; the deletion goes on in bounded steps until nothing of it is left).
 */
export const Context = z
  .object({
    id: Id,
    admins: ActorIds,
    readers: ActorIds,
    executors: ActorIds,
    paused: z.boolean().optional(),
    max_inflight: MaxInflight.optional(),
    flow_starts_per_minute: FlowStartsPerMinute.optional(),
    event_lookback: EventLookback.optional(),
    retention: RetentionPolicy.optional(),
    deleting_since: Timestamp.optional(),
    created_at: Timestamp,
    updated_at: Timestamp,
  })
  .strict()
  .meta({ id: "Context" });
export type Context = z.infer<typeof Context>;

/**
 * `PUT /v1/contexts/{id}/limits`: a number sets a limit (or the event lookback), null lifts it,
 * an absent one stays as it is.
 */
export const ContextLimitsUpdate = z
  .object({
    max_inflight: MaxInflight.nullable().optional(),
    flow_starts_per_minute: FlowStartsPerMinute.nullable().optional(),
    event_lookback: EventLookback.nullable().optional(),
  })
  .strict()
  .meta({ id: "ContextLimitsUpdate" });
export type ContextLimitsUpdate = z.infer<typeof ContextLimitsUpdate>;

/** A context as `GET /v1/contexts/{id}` shows it: the record, the retention in force and what it stores. */
export const ContextDetails = Context.safeExtend({
  retention_in_force: EffectiveRetention,
  stored: ContextStored,
}).meta({ id: "ContextDetails" });
export type ContextDetails = z.infer<typeof ContextDetails>;
