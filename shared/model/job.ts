import { z } from "zod";
import { EnvVars, Id, ResultMap, Seconds, Timestamp } from "./common.js";
import { JobStatus, ScriptType } from "./enums.js";
import { FlowTimeoutsRecord } from "./flow.js";

/**
 * A RunnerJob: one executable unit. Extensions beyond the model: `flow_id` (0 for a job outside
 * any flow), `name` (how the flow's other jobs and its results refer to it), the pinned
 * `runner_id`, `message_base` (its attempts' message ids are message_base, message_base + 1, …),
 * `attempt_floor` (attempts before its flow was last re-run), `past_messages` (the message ids,
 * as inclusive ranges, its attempts used in runs before a re-run: what removing it removes too), and once it ended: the last
 * `attempt`, the `error`, `ended_at`, the runner its last attempt was delivered to
 * (`last_runner_id`), and that attempt's `latency_ms` (queued to delivered) and `duration_ms`
 * (delivered to its end). The last attempt's message takes its final status from these: the
 * commit that ends a job writes only the job (docs/dispatch.md, "What a job costs"). A job run outside any flow keeps its message `timeouts` itself (a
 * flow's jobs have their flow's), so they survive its coordinator's eviction.
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
    depends: z.array(Id),
    runner_id: Id.optional(),
    name: z.string().max(64).optional(),
    message_base: Id.optional(),
    attempt: z.int().min(0).optional(),
    attempt_floor: z.int().min(0).optional(),
    past_messages: z.array(z.array(Id).length(2)).optional(),
    error: z.string().optional(),
    timeouts: FlowTimeoutsRecord.optional(),
    latency_ms: z.int().min(0).optional(),
    duration_ms: z.int().min(0).optional(),
    ended_at: Timestamp.optional(),
    last_runner_id: Id.optional(),
    created_at: Timestamp,
    updated_at: Timestamp,
    status: JobStatus,
  })
  .strict()
  .meta({ id: "RunnerJob" });
export type RunnerJob = z.infer<typeof RunnerJob>;

/** Defaults for a job's optional inputs. */
export const JOB_DEFAULTS = { timeout: 300, retries: 0 } as const;
