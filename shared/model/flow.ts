import { z } from "zod";
import { EnvVars, Id, ResultMap, Timestamp } from "./common.js";
import { FlowStatus } from "./enums.js";

/**
 * A workflow: a DAG of jobs (edges live in each job's `dependends`). `result` aggregates the jobs'
 * result maps by job id, so two jobs may use the same result key without clobbering each other.
 */
export const Flow = z
  .object({
    id: Id,
    caller_id: Id,
    context_id: Id,
    jobs: z.array(Id),
    env_vars: EnvVars,
    result: z.record(z.string(), ResultMap),
    created_at: Timestamp,
    updated_at: Timestamp,
    status: FlowStatus,
  })
  .strict();
export type Flow = z.infer<typeof Flow>;
