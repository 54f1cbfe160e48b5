import { z } from "zod";
import { EnvVars, Id, ResultMap, Timestamp } from "./common.js";
import { FlowStatus, JobStatus, ScriptType } from "./enums.js";
import { FlowErrorInfo, FlowLabels, FlowName, FlowPriority, FlowProgress, MaxParallel } from "./flow.js";
import { ChildFlowSpec, FlowParent } from "./child.js";
import { FlowOrigin } from "./template.js";

/**
 * What the API shows of a running flow: the live state its Durable Object holds, which is more
 * than Redis keeps between a job's dispatch and its end (waiting, delivered, started).
 */

/**
 * Why a job is not running yet: its dependencies, a retry's backoff, dispatch paused, no runner
 * for it, every runner for it at its concurrency, runners refusing it, only pull runners (none
 * leased it), its turn in the queue, or a delivery under way; for a wait, the event it waits for
 * (`until`: when it times out); for a sleep, its end; for a child flow (`child`), that flow's end;
 * for a compensation, that it runs only if the flow unwinds (`compensation`); for a map, its
 * instances (or that it is expanding). `until` (epoch seconds) when it ends at a known time.
 */
export const JobWaiting = z
  .object({
    reason: z.enum([
      "dependencies",
      "backoff",
      "paused",
      "no-runner",
      "runners-busy",
      "flow-limit",
      "context-limit",
      "runner-refusing",
      "pull",
      "queued",
      "delivering",
      "event",
      "sleep",
      "child",
      "compensation",
      "map",
    ]),
    detail: z.string(),
    until: Timestamp.optional(),
  })
  .strict();
export type JobWaiting = z.infer<typeof JobWaiting>;

/**
 * What a job does: runs a script on a runner, waits for an event, sleeps, runs a child flow
 * (`flow`: the last three take no runner), or maps a script over a list (`map`: its instances,
 * jobs of their own, run it).
 */
export const JobKind = z.enum(["script", "wait", "sleep", "flow", "map"]);

/**
 * How a job joined its flow while it ran, when it did: a map's instance (`map_of`, its item's
 * place `item_index`), or a job another job's result added (`added_by`).
 */
export const JobOrigin = {
  map_of: Id.optional(),
  item_index: z.int().min(0).optional(),
  added_by: Id.optional(),
};

/**
 * A job's live state. `key` is how results name it (its name, else its id). A wait shows what it
 * waits for (`wait`: its event, and its key once resolved), a sleep until when (`sleep_until`,
 * epoch seconds, once started), a child-flow job its template (`flow`) and the flow it started
 * (`child_flow_id`), a skipped job why (`skip_reason`); its rules (`when`, `needs`,
 * `allow_failure`) when it has them. A compensation names the job it undoes (`compensates`). A
 * map shows what it maps over (`map`) and, once expanded, its instances; an instance or an added
 * job how it joined (`JobOrigin`).
 */
export const JobView = z
  .object({
    id: Id,
    name: z.string().optional(),
    key: z.string(),
    kind: JobKind,
    script_type: ScriptType.optional(),
    status: JobStatus,
    wait: z.object({ event: z.string(), key: z.string(), timeout: z.int() }).strict().optional(),
    sleep_until: Timestamp.optional(),
    /** A child-flow job: the template it starts. */
    flow: ChildFlowSpec.optional(),
    /** A child-flow job: the flow it started, once known. */
    child_flow_id: Id.optional(),
    map: z.object({ over: z.string() }).strict().optional(),
    instances: z.array(Id).optional(),
    ...JobOrigin,
    when: z.string().optional(),
    needs: z.enum(["all_finished", "all_done", "any_finished", "none_failed"]).optional(),
    allow_failure: z.boolean().optional(),
    skip_reason: z.string().optional(),
    compensates: Id.optional(),
    attempt: z.int().min(0),
    depends: z.array(Id),
    runner_id: Id.optional(),
    delivery: z.enum(["assigned", "delivered", "acknowledged"]).optional(),
    /** When the runner reported the current attempt started (epoch seconds), until the attempt ends. */
    started_at: Timestamp.optional(),
    /** The current attempt's latest heartbeat (epoch seconds). */
    heartbeat_at: Timestamp.optional(),
    /** When the current (or last) attempt was queued for a runner (epoch ms). */
    queued_at_ms: z.int().min(0).optional(),
    /**
     * When the current (or last) attempt began (epoch ms): the runner's start report, else its
     * delivery; a wait's, a sleep's, a map's or a child flow's start. Kept once the job ended.
     */
    started_at_ms: z.int().min(0).optional(),
    /** When the job ended (epoch ms). */
    ended_at_ms: z.int().min(0).optional(),
    /** How long its last attempt ran, once the job ended (ms): `ended_at_ms - started_at_ms`. */
    duration_ms: z.int().min(0).optional(),
    result: ResultMap.optional(),
    error: z.string().optional(),
    waiting: JobWaiting.optional(),
  })
  .strict();
export type JobView = z.infer<typeof JobView>;

/** `flow.load`: a flow with every job's live status and a progress count. */
export const FlowView = z
  .object({
    id: z.int().min(0),
    context_id: Id,
    caller_id: Id,
    status: FlowStatus,
    /** Which run of the flow this is: 1 the first, one more for each re-run (docs/flows.md, "Re-runs"). */
    run: z.int().min(1),
    env_vars: EnvVars,
    result: z.record(z.string(), ResultMap),
    error: FlowErrorInfo.optional(),
    /** The jobs that were skipped, by key, and why. */
    skipped: z.record(z.string(), z.string()).optional(),
    trace_id: z.string(),
    priority: FlowPriority,
    max_parallel: MaxParallel.optional(),
    started_at: Timestamp.optional(),
    /** When the flow began to unwind (compensating). */
    compensating_at: Timestamp.optional(),
    ended_at: Timestamp.optional(),
    /** `started_at` and `ended_at` to the millisecond (epoch ms). */
    started_at_ms: z.int().min(0).optional(),
    ended_at_ms: z.int().min(0).optional(),
    next_deadline: Timestamp.optional(),
    /** The template and version the flow was started from, when it was. */
    template: FlowOrigin.optional(),
    /** The job (of another flow) that started this one, for a child flow. */
    parent: FlowParent.optional(),
    /** The schedule whose fire started it, when one did. */
    schedule_id: Id.optional(),
    name: FlowName.optional(),
    labels: FlowLabels.optional(),
    progress: FlowProgress,
    jobs: z.array(JobView),
    /** The number of the flow's latest event: subscribe with `since` set to it for what follows. */
    last_seq: z.int().min(0).optional(),
  })
  .strict()
  .meta({ id: "FlowView" });
export type FlowView = z.infer<typeof FlowView>;

/**
 * `flow.dag`: nodes with statuses, edges from a dependency to its dependent and from a map to
 * each of its instances.
 */
export const FlowDag = z
  .object({
    flow_id: z.int().min(0),
    status: FlowStatus,
    /** Why the flow ended in error, as its view says (a cancel is told by it). */
    error: FlowErrorInfo.optional(),
    nodes: z.array(
      z
        .object({
          id: Id,
          key: z.string(),
          name: z.string().optional(),
          kind: JobKind,
          script_type: ScriptType.optional(),
          status: JobStatus,
          waiting: JobWaiting.optional(),
          attempt: z.int().min(0),
          runner_id: Id.optional(),
          /** Why it failed, was cancelled or never ran (status error). */
          error: z.string().optional(),
          /** Why its flow's rules skipped it (status skipped). */
          skip_reason: z.string().optional(),
          /** A compensation: the job it undoes. */
          compensates: Id.optional(),
          /** A child-flow job: the flow its current attempt started, once known. */
          child_flow_id: Id.optional(),
          ...JobOrigin,
        })
        .strict(),
    ),
    edges: z.array(z.object({ from: Id, to: Id }).strict()),
  })
  .strict()
  .meta({ id: "FlowDag" });
export type FlowDag = z.infer<typeof FlowDag>;
