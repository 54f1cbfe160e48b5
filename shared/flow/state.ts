import type { z } from "zod";
import type {
  ChildFlowSpec,
  EnvVars,
  FlowParent,
  FlowErrorInfo,
  FlowIdentity,
  FlowOrigin,
  FlowStatus,
  FlowTimeoutsRecord,
  JobStatus,
  MapSpec,
  Needs,
  ResultMap,
  ScriptType,
  WaitSpec,
} from "../model/index.js";
import type { JobTable } from "./job-table.js";

/**
 * What a job runs, and its flow's rules for it: the parts of its RunnerJob record that never
 * change. A job runs a script (`script_type` set), or takes no runner: it waits for an event
 * (`wait`), sleeps (`sleep` seconds, `sleep_until` a time) or runs a child flow (`flow`).
 */
export interface JobSpec {
  script: string;
  script_type?: ScriptType;
  timeout: number;
  retries: number;
  env_vars: EnvVars;
  prerequisites: string[];
  runner_id?: number;
  wait?: WaitSpec;
  /** A map: the script runs once per item of a dependency's list (map.ts). */
  map?: MapSpec;
  sleep?: number;
  sleep_until?: string;
  /** The template a child-flow job starts (children.ts). */
  flow?: ChildFlowSpec;
  /** A CEL condition (expression.ts): false skips the job. */
  when?: string;
  /** When it may run, by how its dependencies ended (unset: all_finished). */
  needs?: Needs;
  /** Its failure does not fail the flow. */
  allow_failure?: boolean;
  /**
   * A compensation: the id of the job it undoes. It runs only while its flow unwinds
   * (compensation.ts), once that job ended (finished: else it is skipped) and the compensations
   * it waits for (its `depends`: those of the jobs that depended on that job) ended.
   */
  compensates?: number;
}

/**
 * What kind of work a job is: a script on a runner, or a wait, a sleep or a child flow, which
 * take none; or a map, which takes none itself: its instances, jobs of their own, run its script.
 */
export type JobKind = "script" | "wait" | "sleep" | "flow" | "map";

export function jobKind(spec: Pick<JobSpec, "wait" | "sleep" | "sleep_until" | "flow" | "map">): JobKind {
  if (spec.map) return "map";
  if (spec.wait) return "wait";
  if (spec.flow) return "flow";
  return spec.sleep !== undefined || spec.sleep_until !== undefined ? "sleep" : "script";
}

/**
 * Which timer a job is waiting on (each timeout is enforced by a deadline): its message to be
 * delivered, acknowledged, its result (a lease renewed by every report), or the end of a retry's
 * backoff; a wait's timeout, a sleep's end; a child flow's next look at its child (`child`: the
 * child's end is told, and this is how it is found when the telling was lost); a map's expansion
 * (due at once: the shell allocates its instances' ids, then sends `expanded`; a deadline, so
 * that it is done even if the object forgets it); and the flow's own deadline (`timeouts.flow`),
 * which belongs to no job (job 0).
 */
export type DeadlineKind = "delivery" | "ack" | "result" | "retry" | "wait" | "sleep" | "child" | "expand" | "flow";

export interface Deadline {
  kind: DeadlineKind;
  attempt: number;
  /** Epoch milliseconds. */
  at: number;
  /** For a result deadline: the runner went silent, or the job ran past its own timeout. */
  why?: "silent" | "timeout";
}

/**
 * Where the current attempt's message is: assigned to a runner (about to be delivered), delivered
 * (the runner has it), acknowledged (the runner confirmed it).
 */
export interface Delivery {
  runnerId: number;
  state: "assigned" | "delivered" | "acknowledged";
  at: number;
}

/** A job inside the machine. `attempt` is 0 until its first dispatch. */
export interface JobState {
  id: number;
  name?: string | undefined;
  depends: number[];
  /** Jobs that depend on this one (derived, kept for speed). */
  dependents: number[];
  /** The id of its compensation, if it declared one (derived from the compensation's `compensates`). */
  compensation?: number;
  spec: JobSpec;
  /** Message id of attempt n is messageBase + n - 1: ids are reserved when the flow is created. */
  messageBase: number;
  status: JobStatus;
  attempt: number;
  /** Attempts made before the current run of the flow (a re-run starts retries afresh). */
  attemptFloor: number;
  /**
   * The message ids (inclusive ranges) attempts of earlier runs used: a re-run gives the job a
   * new block, and removing the flow must still find the old attempts' messages.
   */
  pastMessages?: [number, number][];
  /**
   * The child flows a child-flow job's earlier runs started: a re-run starts a new child, and
   * removing the flow must still remove the old ones (functions/flow/purge-children.ts).
   */
  pastChildren?: number[];
  /** The runner of the previous attempt, which a retry avoids when it can. */
  previousRunner?: number;
  delivery?: Delivery;
  /**
   * What went wrong with the current attempt's last delivery, if anything did: how the runner
   * refused it, or that its answer never came (delivered, unconfirmed).
   */
  refused?: string;
  startedAt?: number;
  heartbeatAt?: number;
  deadline?: Deadline;
  result?: ResultMap;
  error?: string;
  /** Why the job was skipped (status skipped). */
  skipReason?: string;
  /** A running wait's key, resolved from its template when it started. */
  waitKey?: string;
  /** A child-flow job: the flow its current attempt started, once known (children.ts). */
  child?: number;
  /** A map's instances, in item order, once it expanded (map.ts). */
  instances?: number[];
  /** An instance's map, and its item's place in the map's list. */
  mapOf?: number;
  itemIndex?: number;
  /** The job whose result added this one to the flow (growth.ts). */
  addedBy?: number;
  /** When the current attempt was queued for a runner (epoch ms): where its dispatch latency starts. */
  queuedAt?: number;
  /**
   * Once the job ended: how long its last attempt waited from queued to delivered, and ran from
   * delivered to its end (ms). Kept in the job's record; the flow's figures (figures.ts) count them.
   */
  latencyMs?: number;
  durationMs?: number;
  /**
   * When the job ended (epoch ms), while it stays ended: what views show of its end to the
   * millisecond (its record keeps `ended_at` in seconds, which a rebuild reads back).
   */
  endedAt?: number;
}

/** Why a flow ended in error, as the flow record keeps it. */
export type FlowError = z.infer<typeof FlowErrorInfo>;

/**
 * Message timeouts of the flow in seconds, as the flow record keeps them; `timeout_result` unset
 * means each job's own timeout plus a grace minute, and the retry backoff is in milliseconds.
 */
export type FlowTimeouts = z.infer<typeof FlowTimeoutsRecord>;

/**
 * A flow inside the machine. A job outside any flow runs as a flow of one with `id` 0 (its
 * `standaloneJob`), which has no flow record of its own.
 */
export interface FlowState {
  id: number;
  contextId: number;
  callerId: number;
  status: FlowStatus;
  envVars: EnvVars;
  timeouts: FlowTimeouts;
  /** Job ids in submission order (jobs added later are appended). */
  order: number[];
  /** The jobs by id: a persistent table, which a transition changes a path of (job-table.ts). */
  jobs: JobTable<JobState>;
  error?: FlowError;
  traceId: string;
  /** Higher goes first when runners are the bottleneck (0 by default). */
  priority: number;
  /** The most attempts that may hold runner slots at once, if limited. */
  maxParallel?: number;
  /**
   * Whether the flow's result, once in the caller's inbox, is also relayed to be POSTed to the
   * caller's https addresses: false when the caller had none when it submitted the flow. Unset
   * (a flow rebuilt from storage) counts as true: the relay then
   * reads the caller's addresses and POSTs to those it finds.
   */
  notifyHttps?: boolean;
  /** The template and version it was started from (docs/templates.md), when it was. */
  template?: FlowOrigin;
  /** The job that started this flow, for a child flow (its depth bounds its own children). */
  parent?: FlowParent;
  /** Its name, labels and the schedule that started it, when it has any (kept, shown, never acted on). */
  identity?: FlowIdentity;
  startedAt?: number;
  /**
   * When its current run began, once it was re-run: the flow's deadline (`timeouts.flow`) counts
   * from it, since a re-run is a new try (kept in the flow record, `run_started_at`).
   */
  runStartedAt?: number;
  /** When it began to unwind (status compensating), if it did. */
  compensatingAt?: number;
  endedAt?: number;
  /**
   * Which run of the flow this is: unset for the first, 2 after its first re-run, and so on
   * (rerun.ts). Kept in the flow record (`run`); a job outside any flow has none.
   */
  run?: number;
  /**
   * The size of its finished jobs' results together (bytes of JSON), which SIZE_LIMITS bounds:
   * kept from the first time it is needed (a state read back from storage starts without it).
   */
  resultBytes?: number;
}

/**
 * The flow's result: each finished job's result by its key (name, or id when unnamed), in the
 * flow's job order. Derived when asked (a flow's end, a view), not kept up as jobs finish: a map
 * copied at every job's end made a 1,000-job flow quadratic.
 */
export function flowResult(state: Pick<FlowState, "order" | "jobs">): Record<string, ResultMap> {
  const result: Record<string, ResultMap> = {};
  for (const id of state.order) {
    const job = state.jobs.job(id);
    if (job.status === "finished") result[jobKey(job)] = job.result ?? {};
  }
  return result;
}

/** The key a job's results are known by: its name, else its id. */
export function jobKey(job: Pick<JobState, "id" | "name">): string {
  return job.name ?? String(job.id);
}

/** The message id of a job's attempt. */
export function messageId(job: Pick<JobState, "messageBase">, attempt: number): number {
  return job.messageBase + attempt - 1;
}

/**
 * How many message ids one run of a job reserves: one per attempt it may make. A flow reserves a
 * block per job and one id after them for its result message; a re-run does the same for the
 * jobs it runs again.
 */
export function attemptBlock(job: { retries: number }): number {
  return job.retries + 1;
}

/**
 * The id of the message that reports the flow's end to its caller: the one after every attempt's
 * reserved id (the last job's block ends just before it). A re-run job's current block starts at
 * its first attempt of this run, `messageBase + attemptFloor`.
 */
export function resultMessageId(state: Pick<FlowState, "order" | "jobs">): number {
  let next = 0;
  for (const id of state.order) {
    const job = state.jobs.job(id);
    next = Math.max(next, job.messageBase + job.attemptFloor + attemptBlock(job.spec));
  }
  return next;
}
