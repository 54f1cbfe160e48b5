import { z } from "zod";
import { EnvVars, Id, ResultMap, Seconds, Timestamp } from "./common.js";
import { JobStatus, ScriptType } from "./enums.js";
import { ChildFlowSpec } from "./child.js";
import { FlowTimeoutsRecord } from "./flow.js";

/** The longest a wait or a sleep may last: a year, in seconds. */
export const LONGEST_WAIT = 31_536_000;

/** An event's name: what waits and senders agree on (`order.paid`). */
export const EventName = z
  .string()
  .regex(/^[A-Za-z0-9_][A-Za-z0-9_.:/-]{0,127}$/, "an event name: letters, digits and _ . : / -, at most 128");

/**
 * What a job that waits for an event waits for: the event's `name`, and its `key` (a text that
 * may name variables of the job's environment as `${NAME}`, resolved when the wait starts: the
 * flow's and the job's env_vars, `FLOW_ID`, and `DEP_<JOB>_<KEY>` of its dependencies' results),
 * for at most `timeout` seconds; then it ends in error, or is skipped with `on_timeout: skip`.
 */
export const WaitSpec = z
  .object({
    event: EventName,
    key: z.string().max(256).default(""),
    timeout: z.int().min(1).max(LONGEST_WAIT).default(86_400),
    on_timeout: z.enum(["error", "skip"]).default("error"),
  })
  .strict();
export type WaitSpec = z.output<typeof WaitSpec>;

/**
 * When a job may run, by how its dependencies ended: `all_finished` (every one finished: the
 * default), `all_done` (every one ended, however: a clean-up, a report), `any_finished` (as soon
 * as one finished), `none_failed` (every one ended and none in error: skipped ones allowed).
 */
export const Needs = z.enum(["all_finished", "all_done", "any_finished", "none_failed"]);
export type Needs = z.infer<typeof Needs>;

/** The most items one map may expand into (docs/flows.md, "Map"): a longer list ends the map in error. */
export const MAP_ITEMS_MAX = 1000;

/**
 * A map: the job runs once per item of a list, a result value of one of its dependencies, named
 * `over: <dependency>.<key>` (the value is a JSON list, at most MAP_ITEMS_MAX items). Each run,
 * an instance, is a job of its own (`<job>[<i>]`) with `ITEM` and `ITEM_INDEX` in its
 * environment; the map ends once every instance ended (docs/flows.md, "Map").
 */
export const MapSpec = z
  .object({
    over: z
      .string()
      .min(3)
      .max(200)
      .regex(/^.+\..+$/, "<dependency>.<result key>")
      .describe("The list to map over: `<dependency>.<result key>`, a result value holding a JSON list."),
  })
  .strict();
export type MapSpec = z.output<typeof MapSpec>;

/**
 * A RunnerJob: one executable unit. Extensions beyond the model: `flow_id` (0 for a job outside
 * any flow), `name` (how the flow's other jobs and its results refer to it), the pinned
 * `runner_id`, what a job that runs no script does instead (`wait` for an event, `sleep` seconds or
 * `sleep_until` a time, or start a child `flow` from a template: `child_flow_id` once it ended), its flow's rules (`when`, `needs`, `allow_failure`; `skip_reason` once
 * skipped), `message_base` (its attempts' message ids are message_base, message_base + 1, …),
 * `attempt_floor` (attempts before its flow was last re-run), `compensates` (a compensation: the
 * id of the job of its flow it undoes, docs/flows.md "Compensation"), `past_messages` (the message ids,
 * as inclusive ranges, its attempts used in runs before a re-run: what removing it removes too), and once it ended: the last
 * `attempt`, the `error`, `ended_at`, the runner its last attempt was delivered to
 * (`last_runner_id`), and that attempt's `latency_ms` (queued to delivered) and `duration_ms`
 * (delivered to its end). A map keeps its `map`; each of its instances the map's id (`map_of`)
 * and its item's place in the list (`item_index`); a job another job's result added to the flow
 * the id of that job (`added_by`). The last attempt's message takes its final status from these: the
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
    /** Absent for a job that runs no script (a wait or a sleep). */
    script_type: ScriptType.optional(),
    timeout: Seconds,
    retries: z.int().min(0).max(255),
    env_vars: EnvVars,
    result: ResultMap,
    prerequisites: z.array(z.string().max(256)).max(256),
    depends: z.array(Id),
    runner_id: Id.optional(),
    /** A name given in a flow file (64 characters at most), or a map instance's `<map>[<i>]`. */
    name: z.string().max(72).optional(),
    wait: WaitSpec.optional(),
    map: MapSpec.optional(),
    map_of: Id.optional(),
    item_index: z.int().min(0).optional(),
    added_by: Id.optional(),
    sleep: z.int().min(0).max(LONGEST_WAIT).optional(),
    sleep_until: z.string().max(256).optional(),
    flow: ChildFlowSpec.optional(),
    /** The child flow the job started (a child-flow job), once it ended. */
    child_flow_id: Id.optional(),
    when: z.string().optional(),
    needs: Needs.optional(),
    allow_failure: z.boolean().optional(),
    skip_reason: z.string().optional(),
    compensates: Id.optional(),
    message_base: Id.optional(),
    attempt: z.int().min(0).optional(),
    attempt_floor: z.int().min(0).optional(),
    past_messages: z.array(z.array(Id).length(2)).optional(),
    /** A child-flow job: the child flows its runs before the current one started. */
    past_children: z.array(Id).optional(),
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

/**
 * The script type of a job a runner was given. Only script jobs are ever delivered (a wait or a
 * sleep takes no runner), so a job without one is a coordinator's bug, said as such.
 */
export function scriptTypeOf(job: { id: number; script_type?: ScriptType | undefined }): ScriptType {
  if (job.script_type === undefined) throw new Error(`job ${job.id} runs no script: it has no script type`);
  return job.script_type;
}

/** Defaults for a job's optional inputs. */
export const JOB_DEFAULTS = { timeout: 300, retries: 0 } as const;
