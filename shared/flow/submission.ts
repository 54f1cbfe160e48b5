import { z } from "zod";
import { EnvVarsInput, Id, Seconds } from "../model/common.js";
import { ScriptType } from "../model/enums.js";
import { FlowPriority, MaxParallel } from "../model/flow.js";
import { JOB_DEFAULTS } from "../model/job.js";

/**
 * Limits of one flow submission. A flow is written to storage in one atomic step, and a flow whose
 * jobs are all ready at once queues them in one command: Lua's `unpack` takes some 8,000 values,
 * which caps a flow at a few thousand jobs until creation and queueing are written in chunks.
 */
export const FLOW_LIMITS = {
  jobsPerFlow: 2000,
  scriptBytes: 16 * 1024,
  dependenciesPerJob: 1000,
} as const;

/** A job's name inside its flow: how other jobs refer to it, and how its results are named. */
export const JobName = z
  .string()
  .regex(/^[A-Za-z_][A-Za-z0-9_.-]{0,63}$/, "a name: letters, digits, _ . -, starting with a letter or _, at most 64");

/** A reference to another job of the same flow: its id, or its name. */
export const JobRef = z.union([Id, JobName]);
export type JobRef = z.infer<typeof JobRef>;

/**
 * One job of a flow submission. `id` is optional (allocated when absent); `name` lets other jobs
 * depend on it without knowing its id. `depends` lists ids or names; `dependends`, the name the
 * herocoordinator model gives it, is accepted as an alias.
 */
export const FlowJobInput = z
  .object({
    id: Id.optional(),
    name: JobName.optional(),
    script: z.string().refine((s) => new TextEncoder().encode(s).length <= FLOW_LIMITS.scriptBytes, {
      message: `a script is at most ${FLOW_LIMITS.scriptBytes} bytes`,
    }),
    script_type: ScriptType,
    timeout: Seconds.default(JOB_DEFAULTS.timeout),
    retries: z.int().min(0).max(255).default(JOB_DEFAULTS.retries),
    env_vars: EnvVarsInput.default({}),
    prerequisites: z.array(z.string().max(256)).max(256).default([]),
    depends: z.array(JobRef).max(FLOW_LIMITS.dependenciesPerJob).optional(),
    dependends: z.array(JobRef).max(FLOW_LIMITS.dependenciesPerJob).optional(),
    runner_id: Id.optional(),
  })
  .strict()
  .superRefine((job, ctx) => {
    if (job.dependends !== undefined && job.depends !== undefined) {
      ctx.addIssue({ code: "custom", path: ["dependends"], message: "give depends or its alias dependends, not both" });
    }
  })
  .transform(({ depends, dependends, ...job }) => ({ ...job, depends: depends ?? dependends ?? [] }));
export type FlowJobInput = z.output<typeof FlowJobInput>;

/** Message timeouts of a flow's jobs, in seconds (defaults in MESSAGE_TIMEOUTS). */
export const MessageTimeouts = z
  .object({
    /** Not delivered to a runner within this: the delivery failed. */
    timeout: Seconds.min(1).optional(),
    /** Delivered but not acknowledged within this. */
    timeout_ack: Seconds.min(1).optional(),
    /**
     * Acknowledged, the runner must report (result, heartbeat, logs) within this of its last
     * report: a lease each report renews, up to the job's own timeout (default: the job's timeout
     * plus a minute, so no heartbeats are needed).
     */
    timeout_result: Seconds.min(1).optional(),
    /** Retry backoff: base and cap of the exponential, in milliseconds (full jitter). */
    retry_base_ms: z.int().min(0).max(3_600_000).optional(),
    retry_cap_ms: z.int().min(0).max(86_400_000).optional(),
  })
  .strict();

export const MESSAGE_TIMEOUTS = { timeout: 300, timeout_ack: 60, resultGrace: 60 } as const;

/** `POST /v1/contexts/{id}/flows`: a DAG of jobs, stored all or nothing. */
export const FlowSubmission = z
  .object({
    id: Id.optional(),
    env_vars: EnvVarsInput.default({}),
    jobs: z
      .array(FlowJobInput)
      .min(1, "a flow has at least one job")
      .max(FLOW_LIMITS.jobsPerFlow, `a flow has at most ${FLOW_LIMITS.jobsPerFlow} jobs`),
    start: z.boolean().default(false),
    timeouts: MessageTimeouts.default({}),
    priority: FlowPriority.default(0),
    max_parallel: MaxParallel.optional(),
  })
  .strict()
  .meta({ id: "FlowSubmission" });
export type FlowSubmission = z.output<typeof FlowSubmission>;
export type FlowSubmissionInput = z.input<typeof FlowSubmission>;
