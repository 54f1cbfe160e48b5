import { z } from "zod";
import { EnvVars, Id, ResultMap, Seconds, Timestamp } from "./common.js";
import { FlowStatus } from "./enums.js";
import { FlowParent } from "./child.js";
import { FlowOrigin } from "./template.js";

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
 * version it was started from (docs/templates.md), and `parent`: the job that started it, for a
 * child flow.
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
  })
  .strict()
  .meta({ id: "Flow" });
export type Flow = z.infer<typeof Flow>;
