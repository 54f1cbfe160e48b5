import { z } from "zod";
import { Id, Timestamp } from "./common.js";
import { StoredTemplateRef, TemplateRef } from "./template.js";

/*
 * Recurring flows (docs/schedules.md): a schedule is a flow template plus when to start it (a
 * cron expression in a time zone, or a fixed interval), what to do when a fire comes while the
 * previous run still goes (`overlap`), and what to do with fires missed while the coordinator was
 * away (`catchup`). The template's own schema is the flow submission's (shared/flow), a layer
 * above this one, so the creation request is built from it by `scheduleCreation`. Instead of a
 * flow of its own, a schedule may name a stored flow template (`from_template`: its name, a
 * version or the latest at each fire, and inputs; docs/templates.md).
 */

/** How many past fires a schedule's view keeps. */
export const RECENT_RUNS = 20;

/** How many coming fires a schedule's view lists (the next one included). */
export const UPCOMING_FIRES = 5;

/** The longest interval a schedule may have: a year. */
export const MAX_INTERVAL_SECONDS = 366 * 86_400;

/**
 * What a fire does while a run the schedule started is still going, as Temporal names it:
 * `skip` it, `buffer_one` (start it once the running flow ends; at most one waits, further fires
 * are skipped), `allow_all` (start it anyway), `cancel_other` (cancel the running flows, then
 * start it).
 */
export const ScheduleOverlap = z.enum(["skip", "buffer_one", "allow_all", "cancel_other"]);
export type ScheduleOverlap = z.infer<typeof ScheduleOverlap>;

/**
 * Fires missed while the coordinator was away (its alarm could not ring): `skip` them (one run
 * record says how many), or `run` the latest `max` of them, oldest first, each through the
 * overlap policy.
 */
export const ScheduleCatchup = z
  .object({
    policy: z.enum(["skip", "run"]).default("skip"),
    max: z.int().min(1).max(100).default(10),
  })
  .strict();
export type ScheduleCatchup = z.infer<typeof ScheduleCatchup>;

/** Whether `zone` is an IANA time zone this runtime knows. */
export function isTimeZone(zone: string): boolean {
  try {
    new Intl.DateTimeFormat("en", { timeZone: zone });
    return true;
  } catch {
    return false;
  }
}

/** The fields of a schedule besides its template, as a creation request gives them. */
const specFields = {
  cron: z
    .string()
    .max(200)
    .optional()
    .describe("A cron expression: 5 fields (minute hour day month weekday) or 6 (seconds first)"),
  timezone: z.string().max(64).optional().describe("The IANA time zone the cron expression is read in (default UTC)"),
  interval_seconds: z
    .int()
    .min(1)
    .max(MAX_INTERVAL_SECONDS)
    .optional()
    .describe("Instead of a cron expression: a fire every this many seconds, from when the schedule was created"),
  overlap: ScheduleOverlap.default("skip"),
  catchup: ScheduleCatchup.default({ policy: "skip", max: 10 }),
  paused: z.boolean().default(false).describe("Created paused: nothing fires until resumed"),
  note: z.string().max(500).optional(),
};

/** Why a cron expression does not parse, or undefined when it does (the parser lives above this layer). */
export type CronCheck = (expression: string) => string | undefined;

/** Checks what a schema cannot say field by field: cron xor interval, a cron that parses, a known zone. */
function checkSpec(
  spec: { cron?: string | undefined; timezone?: string | undefined; interval_seconds?: number | undefined },
  cronProblem: CronCheck,
  ctx: z.RefinementCtx,
): void {
  if ((spec.cron === undefined) === (spec.interval_seconds === undefined)) {
    ctx.addIssue({
      code: "custom",
      path: ["cron"],
      message: "give either cron or interval_seconds, not both or neither",
    });
    return;
  }
  if (spec.cron !== undefined) {
    const problem = cronProblem(spec.cron);
    if (problem) ctx.addIssue({ code: "custom", path: ["cron"], message: `not a valid cron expression: ${problem}` });
  }
  if (spec.timezone !== undefined) {
    if (spec.cron === undefined)
      ctx.addIssue({ code: "custom", path: ["timezone"], message: "a time zone goes with a cron expression only" });
    else if (!isTimeZone(spec.timezone))
      ctx.addIssue({ code: "custom", path: ["timezone"], message: `not an IANA time zone: ${spec.timezone}` });
  }
}

/**
 * `POST /v1/contexts/{c}/schedules`: the flow `template` (the flow submission without `id` and
 * `start`, whose schema the caller passes) or `from_template` (a stored template by name), plus
 * either `cron` (with `timezone`) or `interval_seconds`, the overlap and catch-up policies, and
 * whether it starts paused. The cron parser is passed in too: it is a library the browser's
 * bundle of this layer should not carry.
 */
export function scheduleCreation<T extends z.ZodType>(template: T, cronProblem: CronCheck) {
  return z
    .object({
      template: template.optional(),
      from_template: TemplateRef.optional().describe(
        "Instead of template: a stored flow template each fire starts (its version, default the latest at the fire, and inputs)",
      ),
      ...specFields,
    })
    .strict()
    .superRefine((spec, ctx) => {
      if ((spec.template === undefined) === (spec.from_template === undefined))
        ctx.addIssue({
          code: "custom",
          path: ["template"],
          message: "give either template (a flow) or from_template (a stored template's name), not both or neither",
        });
      checkSpec(spec, cronProblem, ctx);
    });
}

/** A schedule as stored (one hash, `ctx:{C}:schedule:<id>`). */
export const Schedule = z
  .object({
    id: Id,
    context_id: Id,
    /** The admin who created it: its flows are submitted as this actor, whose permission is checked at each fire. */
    creator_id: Id,
    cron: z.string().optional(),
    timezone: z.string().optional(),
    interval_seconds: z.int().min(1).optional(),
    overlap: ScheduleOverlap,
    catchup: ScheduleCatchup,
    /** The flow submission each fire starts (as validated at creation), or none with `from_template`. */
    template: z.record(z.string(), z.unknown()).optional(),
    /** The stored template each fire starts instead (its version: as given, else the latest at the fire). */
    from_template: StoredTemplateRef.optional(),
    paused: z.boolean(),
    /** Why it was paused when the coordinator paused it (its creator lost the admin permission). */
    paused_reason: z.string().optional(),
    note: z.string().optional(),
    /** Epoch ms intervals count from: fires come at anchor + k × interval, whenever the alarm rang. */
    anchor_ms: z.int().min(0),
    next_fire_at: Timestamp.optional(),
    last_fire_at: Timestamp.optional(),
    created_at: Timestamp,
    updated_at: Timestamp,
  })
  .strict()
  .meta({ id: "Schedule" });
export type Schedule = z.infer<typeof Schedule>;

/**
 * What became of one fire: `started` (its flow), `skipped` (a run still going, or missed fires
 * the catch-up policy dropped), `buffered` (waits for the running flow to end), `cancelled_other`
 * (the running flows were cancelled and its flow started), `failed` (`reason` says why).
 */
export const ScheduleRunOutcome = z.enum(["started", "skipped", "buffered", "cancelled_other", "failed"]);
export type ScheduleRunOutcome = z.infer<typeof ScheduleRunOutcome>;

/** One fire of a schedule, as its recent runs list it. */
export const ScheduleRun = z
  .object({
    /** The fire's time (epoch seconds): when the schedule said to start, not when it did. */
    fire_at: Timestamp,
    trigger: z.enum(["schedule", "catchup", "manual", "buffered"]),
    outcome: ScheduleRunOutcome,
    flow_id: Id.optional(),
    reason: z.string().optional(),
    /** When the coordinator acted on it (epoch seconds). */
    at: Timestamp,
  })
  .strict()
  .meta({ id: "ScheduleRun" });
export type ScheduleRun = z.infer<typeof ScheduleRun>;

/** A schedule as listings show it: the record and whether it fires. */
export const ScheduleSummary = Schedule.safeExtend({ status: z.enum(["active", "paused"]) }).meta({
  id: "ScheduleSummary",
});
export type ScheduleSummary = z.infer<typeof ScheduleSummary>;

/** A schedule with what its Durable Object knows: recent runs (newest first), a buffered fire, flows still running. */
export const ScheduleView = ScheduleSummary.safeExtend({
  recent_runs: z.array(ScheduleRun),
  upcoming_fires: z
    .array(Timestamp)
    .max(UPCOMING_FIRES)
    .describe("The next fires (epoch seconds), the next one first, as the spec gives them; none while paused"),
  buffered_fire_at: Timestamp.optional(),
  running_flow_ids: z.array(Id),
}).meta({ id: "ScheduleView" });
export type ScheduleView = z.infer<typeof ScheduleView>;
