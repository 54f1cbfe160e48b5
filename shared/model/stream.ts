import { z } from "zod";
import { Id, Log, ResultMap } from "./common.js";
import { FlowStatus, JobStatus, ScriptType } from "./enums.js";
import { JobKind, JobOrigin } from "./views.js";
import { FlowLabels, FlowName, FlowPriority, FlowTriggerInfo } from "./flow.js";

/**
 * What happened to a flow, as its event stream tells it. `flow.*` events are about the flow as a
 * whole (and are also published on its context's stream); `job.*` events about one job.
 */
export const FlowEventType = z.enum([
  "flow.created",
  "flow.started",
  "flow.paused",
  "flow.resumed",
  "flow.cancelled",
  "flow.rerun",
  "flow.finished",
  "flow.error",
  "flow.compensating",
  "flow.compensated",
  "flow.compensation_failed",
  "job.waiting",
  "job.ready",
  "job.dispatched",
  "job.delivered",
  "job.started",
  "job.heartbeat",
  "job.logs",
  "job.finished",
  "job.error",
  "job.retry_scheduled",
  "job.dead_lettered",
  "job.wait_started",
  "job.sleep_started",
  "job.child_started",
  "job.skipped",
  "job.added",
]);
export type FlowEventType = z.infer<typeof FlowEventType>;

/**
 * A job that joined the flow while it ran (`job.added`): a map's instance, or a job a result
 * added. What a watcher needs to draw it: how it is named, what it is, what it depends on.
 */
export const AddedJob = z
  .object({
    key: z.string(),
    name: z.string().optional(),
    kind: JobKind,
    script_type: ScriptType.optional(),
    depends: z.array(Id),
    ...JobOrigin,
  })
  .strict();
export type AddedJob = z.infer<typeof AddedJob>;

/**
 * One event of a flow's stream. `seq` increases by one per event of the flow (from 1), so a
 * subscriber that saw `seq` n resumes with `since=n` (or `Last-Event-ID: n`) and gets n+1 onwards,
 * nothing lost and nothing twice. `at_ms` is epoch milliseconds. `status` is the job's status
 * after the event (for `flow.*`, the flow's).
 */
export const FlowStreamEvent = z
  .object({
    seq: z.int().min(1),
    type: FlowEventType,
    at_ms: z.int().min(0),
    context_id: Id,
    flow_id: z.int().min(0),
    trace_id: z.string(),
    status: z.union([JobStatus, FlowStatus]),
    job_id: Id.optional(),
    attempt: z.int().min(0).optional(),
    runner_id: Id.optional(),
    /** Epoch milliseconds at which a scheduled retry is due (`job.retry_scheduled`). */
    retry_at_ms: z.int().min(0).optional(),
    result: ResultMap.optional(),
    error: z.string().optional(),
    /** Why (a cancel's reason, a dead letter's, a pause's). */
    reason: z.string().optional(),
    /** The log lines that arrived (`job.logs`). */
    lines: z.array(Log).optional(),
    /** A wait's event name and resolved key (`job.wait_started`). */
    event_name: z.string().optional(),
    event_key: z.string().optional(),
    /** Epoch milliseconds a wait times out or a sleep ends (`job.wait_started`, `job.sleep_started`). */
    until_ms: z.int().min(0).optional(),
    /**
     * Which run of the flow the event is of (on every event from a first re-run on; absent: run
     * 1). Attempt numbers go on across runs, so an attempt is also its run's.
     */
    run: z.int().min(1).optional(),
    /** `flow.rerun`: the jobs that run again, the job asked to re-run from, the env variables changed. */
    jobs: z.array(Id).optional(),
    from_job_id: Id.optional(),
    env_changed: z.array(z.string()).optional(),
    /** The child flow a child-flow job started (`job.child_started`). */
    child_flow_id: z.int().min(1).optional(),
    /** A job event of a compensation: the job it undoes. */
    compensates: Id.optional(),
    /** The job that joined the flow (`job.added`). */
    job: AddedJob.optional(),
    /** For `flow.*`: how many jobs are in each status now. */
    progress: z.record(JobStatus, z.int().min(0)).optional(),
    /** For `flow.*`: the flow's name, when it has one. */
    name: FlowName.optional(),
    /** `flow.created`: the flow's labels, when it has any. */
    labels: FlowLabels.optional(),
    /** `flow.created`: what started the flow. */
    trigger: FlowTriggerInfo.optional(),
    /** `flow.created`: the flow's priority, when it is not the default (0). */
    priority: FlowPriority.optional(),
  })
  .strict()
  .meta({ id: "FlowStreamEvent" });
export type FlowStreamEvent = z.infer<typeof FlowStreamEvent>;

/**
 * One event of a context's stream: a flow's `flow.*` event, numbered again in the context's own
 * sequence (`seq`); `flow_seq` is its number in the flow's stream. A subscriber that resumes from
 * a sequence the context no longer keeps gets one `stream.reset` event first (its `seq` is the
 * one before the oldest kept): reload the list, then read on.
 */
export const ContextStreamEvent = z
  .union([
    FlowStreamEvent.extend({ flow_seq: z.int().min(1) }).strict(),
    z
      .object({
        seq: z.int().min(0),
        type: z.literal("stream.reset"),
        at_ms: z.int().min(0),
        context_id: Id,
        reason: z.string(),
      })
      .strict(),
  ])
  .meta({ id: "ContextStreamEvent" });
export type ContextStreamEvent = z.infer<typeof ContextStreamEvent>;

/** `POST /v1/tickets`: a single-use ticket that opens one WebSocket as the signer. */
export const StreamTicket = z
  .object({
    ticket: z.string(),
    /** Epoch seconds after which the ticket is refused. */
    expires_at: z.int().min(0),
  })
  .strict()
  .meta({ id: "StreamTicket" });
export type StreamTicket = z.infer<typeof StreamTicket>;
