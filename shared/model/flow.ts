import { z } from "zod";
import { EnvVars, Id, ResultMap, Seconds, Timestamp } from "./common.js";
import { FlowStatus } from "./enums.js";
import { FlowParent } from "./child.js";
import { FlowOrigin } from "./template.js";
import { FLOW_IDENTITY_LIMITS, LABEL_KEY, NO_CONTROL } from "./flow-identity.js";

/**
 * Why a flow ended in error: the job at fault (0 when the flow was cancelled) and the reason; a
 * flow whose unwinding did not complete (compensation_failed) also names the compensations that
 * failed (or were cancelled), by key.
 */
export const FlowErrorInfo = z
  .object({
    job: z.int().min(0),
    name: z.string().optional(),
    reason: z.string(),
    failed_compensations: z.array(z.string()).optional(),
  })
  .strict();

/**
 * Where a flow's ready jobs stand when runners are the bottleneck: higher first; flows of one
 * priority take turns (docs/dispatch.md, "Fairness").
 */
export const FlowPriority = z
  .int()
  .min(-1000)
  .max(1000)
  .describe(
    "Where the flow's ready jobs stand when runners are the bottleneck: a higher priority goes first; flows of one priority take turns (default 0).",
  );

/** The most attempts of one flow that may hold runner slots at once. */
export const MaxParallel = z
  .int()
  .min(1)
  .max(100_000)
  .describe("The most of the flow's job attempts that runners may hold at once (default: no limit of its own).");

const { nameChars, labels, labelKeyChars, labelValueChars } = FLOW_IDENTITY_LIMITS;

/** A flow's name: a short title people find it by (lists filter on it); not unique, not its id. */
export const FlowName = z
  .string()
  .min(1, "a flow's name is not empty")
  .max(nameChars, `a flow's name is at most ${nameChars} characters`)
  .regex(NO_CONTROL, "a flow's name is one line: no control characters")
  .refine((name) => name.trim() === name, "a flow's name neither starts nor ends with a space")
  .describe(
    `A short title for the flow, shown in lists and filtered on (at most ${nameChars} characters; not unique). flowc gives the flow file's name by default, a template start the template's name.`,
  );

/** A flow's labels: a few key/value pairs to find and group flows by (Kubernetes' labels, Temporal's search attributes). */
export const FlowLabels = z
  .record(
    z.string(),
    z
      .string()
      .max(labelValueChars, `a label's value is at most ${labelValueChars} characters`)
      .regex(NO_CONTROL, "a label's value is one line: no control characters"),
  )
  .superRefine((map, ctx) => {
    const keys = Object.keys(map);
    if (keys.length > labels) ctx.addIssue({ code: "custom", message: `a flow has at most ${labels} labels` });
    // Checked here rather than by the record's key schema, whose issue would only say "Invalid key".
    for (const key of keys) {
      if (key.length > labelKeyChars)
        ctx.addIssue({ code: "custom", path: [key], message: `a label's key is at most ${labelKeyChars} characters` });
      else if (!LABEL_KEY.test(key))
        ctx.addIssue({
          code: "custom",
          path: [key],
          message: "a label's key: letters, digits and _ . / -, starting and ending with a letter or digit",
        });
    }
  })
  .describe(
    `Key/value pairs to find flows by (lists filter on \`label=key:value\`): at most ${labels}, keys of letters, digits and _ . / - up to ${labelKeyChars} characters, values up to ${labelValueChars}.`,
  );

/** How many of a flow's jobs are in each status, and their total. */
export const FlowProgress = z
  .object({
    total: z.int().min(0),
    dispatched: z.int().min(0),
    waiting_for_prerequisites: z.int().min(0),
    started: z.int().min(0),
    finished: z.int().min(0),
    error: z.int().min(0),
    skipped: z.int().min(0),
  })
  .strict()
  .meta({ id: "FlowProgress" });
export type FlowProgress = z.infer<typeof FlowProgress>;

/**
 * What started a flow (flow-identity.ts, flowTrigger): a submission (`manual`), a schedule's fire,
 * a parent flow's job (a child flow), a template start. Told by its `flow.created` event; a
 * record or a view says the same in `schedule_id`, `parent` and `template`.
 */
export const FlowTriggerInfo = z
  .discriminatedUnion("kind", [
    z.object({ kind: z.literal("manual") }).strict(),
    z.object({ kind: z.literal("schedule"), schedule_id: Id }).strict(),
    z.object({ kind: z.literal("parent"), flow_id: Id, job_id: Id }).strict(),
    z.object({ kind: z.literal("template"), name: z.string(), version: z.int().min(1) }).strict(),
  ])
  .meta({ id: "FlowTrigger" });

/** Message timeouts of a flow's jobs, in seconds. */
export const FlowTimeoutsRecord = z
  .object({
    timeout: Seconds,
    timeout_ack: Seconds,
    timeout_result: Seconds.optional(),
    retry_base_ms: z.int().min(0).optional(),
    retry_cap_ms: z.int().min(0).optional(),
    flow: z.int().min(1).optional(),
  })
  .strict();

/**
 * A workflow: a DAG of jobs (edges live in each job's `depends`). Its results are its jobs' result
 * maps by job key (the job's name, or its id when unnamed), so two jobs may use the same result
 * key without clobbering each other; they are kept once, in the jobs' records, and a flow's view
 * (`FlowView.result`) gathers them: the record's `result`, which the model has, is not stored and
 * lists of flows leave it out. Extensions beyond the model: `error`, `timeouts`, `trace_id`,
 * `priority`, `max_parallel`, `started_at`, `compensating_at`, `ended_at`, `run`, `run_started_at`, `template`: the template and
 * version it was started from (docs/templates.md), `parent`: the job that started it, for a
 * child flow, `schedule_id`: the schedule that started it; its identity, `name` and `labels`;
 * and `progress`, its jobs per status once it ended.
 */
export const Flow = z
  .object({
    id: Id,
    caller_id: Id,
    context_id: Id,
    jobs: z.array(Id),
    env_vars: EnvVars,
    result: z.record(z.string(), ResultMap).optional(),
    created_at: Timestamp,
    updated_at: Timestamp,
    status: FlowStatus,
    error: FlowErrorInfo.optional(),
    timeouts: FlowTimeoutsRecord.optional(),
    trace_id: z.string().max(64).optional(),
    priority: FlowPriority.optional(),
    max_parallel: MaxParallel.optional(),
    started_at: Timestamp.optional(),
    /** When the flow began to unwind (its status went to compensating). */
    compensating_at: Timestamp.optional(),
    ended_at: Timestamp.optional(),
    run: z
      .int()
      .min(2)
      .optional()
      .describe("Which run of the flow this is, once it was re-run: 2 after its first re-run (absent: its first run)."),
    run_started_at: Timestamp.optional().describe(
      "When its current run began, once it was re-run: its deadline (timeouts.flow) counts from then.",
    ),
    template: FlowOrigin.optional(),
    parent: FlowParent.optional(),
    name: FlowName.optional(),
    labels: FlowLabels.optional(),
    schedule_id: Id.optional().describe("The schedule whose fire started the flow, when one did."),
    progress: FlowProgress.optional().describe(
      "How many of its jobs are in each status: stored with the flow's end; a list gives it for running flows too, live.",
    ),
  })
  .strict()
  .meta({ id: "Flow" });
export type Flow = z.infer<typeof Flow>;
