import { z } from "zod";
import { EnvVars, Id, ResultMap, Seconds, Timestamp } from "./common.js";
import { JobStatus, ScriptType } from "./enums.js";

/**
 * A RunnerJob: one executable unit. Extensions beyond the seeds: `flow_id` (0 for a job outside
 * any flow), `name` (how the flow's other jobs and its results refer to it), the pinned
 * `runner_id`, `message_base` (its attempts' message ids are message_base, message_base + 1, …),
 * `attempt_floor` (attempts before its flow was last re-run), and once it ended: the last
 * `attempt` and the `error`.
 */
export const RunnerJob = z
  .object({
    id: Id,
    caller_id: Id,
    context_id: Id,
    flow_id: z.int().min(0),
    script: z.string(),
    script_type: ScriptType,
    timeout: Seconds,
    retries: z.int().min(0).max(255),
    env_vars: EnvVars,
    result: ResultMap,
    prerequisites: z.array(z.string().max(256)).max(256),
    dependends: z.array(Id),
    runner_id: Id.optional(),
    name: z.string().max(64).optional(),
    message_base: Id.optional(),
    attempt: z.int().min(0).optional(),
    attempt_floor: z.int().min(0).optional(),
    error: z.string().optional(),
    created_at: Timestamp,
    updated_at: Timestamp,
    status: JobStatus,
  })
  .strict();
export type RunnerJob = z.infer<typeof RunnerJob>;

/** Defaults for a job's optional inputs. */
export const JOB_DEFAULTS = { timeout: 300, retries: 0 } as const;

/**
 * A job as a caller submits it: the seeds' wire names, `depends` accepted as an alias of
 * `dependends` (giving both is an error naming `depends`), defaults filled in.
 */
export const JobInput = z
  .object({
    id: Id.optional(),
    script: z.string(),
    script_type: ScriptType,
    timeout: Seconds.default(JOB_DEFAULTS.timeout),
    retries: z.int().min(0).max(255).default(JOB_DEFAULTS.retries),
    env_vars: EnvVars.default({}),
    prerequisites: z.array(z.string().max(256)).max(256).default([]),
    dependends: z.array(Id).optional(),
    depends: z.array(Id).optional(),
    runner_id: Id.optional(),
  })
  .strict()
  .superRefine((job, ctx) => {
    if (job.dependends !== undefined && job.depends !== undefined) {
      ctx.addIssue({ code: "custom", path: ["depends"], message: "give dependends or its alias depends, not both" });
    }
  })
  .transform(({ depends, dependends, ...job }) => ({ ...job, dependends: dependends ?? depends ?? [] }));
export type JobInput = z.input<typeof JobInput>;
export type JobSpec = z.output<typeof JobInput>;
