import { identityOf, type Flow, type FlowIdentity, type Message, type RunnerJob } from "../model/index.js";
import { linkedTable, specOf } from "./build.js";
import { ENDED } from "./draft.js";
import { readiness } from "./rules.js";
import { MESSAGE_TIMEOUTS } from "./submission.js";
import { jobKind, type Deadline, type Delivery, type FlowState, type FlowTimeouts, type JobState } from "./state.js";
import { noRunnerStart } from "./work.js";
import { instanceSpecOf } from "./map.js";

/**
 * What Redis does not hold about a job in progress (it keeps only final statuses): where the
 * current attempt's message is, when the job started, its last heartbeat and its deadline. The
 * Durable Object journals these in its own storage.
 */
export interface JobJournal {
  attempt: number;
  delivery?: Delivery;
  refused?: string;
  startedAt?: number;
  heartbeatAt?: number;
  deadline?: Deadline;
  queuedAt?: number;
  /** A running wait's resolved key. */
  waitKey?: string;
  /** A running child-flow job's child, once known. */
  child?: number;
}

export type Journal = Record<number, JobJournal>;

/** The transient facts of a job in progress; undefined for one not sent yet or ended. */
export function jobJournalOf(job: JobState): JobJournal | undefined {
  if (job.attempt === 0 || ENDED.has(job.status)) return undefined;
  return {
    attempt: job.attempt,
    ...(job.delivery ? { delivery: job.delivery } : {}),
    ...(job.refused !== undefined ? { refused: job.refused } : {}),
    ...(job.startedAt !== undefined ? { startedAt: job.startedAt } : {}),
    ...(job.heartbeatAt !== undefined ? { heartbeatAt: job.heartbeatAt } : {}),
    ...(job.deadline ? { deadline: job.deadline } : {}),
    ...(job.queuedAt !== undefined ? { queuedAt: job.queuedAt } : {}),
    ...(job.waitKey !== undefined ? { waitKey: job.waitKey } : {}),
    ...(job.child !== undefined ? { child: job.child } : {}),
  };
}

/** The transient facts of every job in progress. */
export function journalOf(state: FlowState): Journal {
  const journal: Journal = {};
  for (const id of state.order) {
    const entry = jobJournalOf(state.jobs.job(id));
    if (entry) journal[id] = entry;
  }
  return journal;
}

interface StoredRecords {
  /** The flow record; null for a job outside any flow. */
  flow: Flow | null;
  contextId: number;
  callerId: number;
  jobs: RunnerJob[];
  /** Each job's messages, any order. */
  messages: Map<number, Message[]>;
  journal?: Journal;
}

/**
 * Rebuilds the machine's state from storage after the Durable Object lost its memory: final
 * statuses and results from the job records, the current attempt from the newest message of
 * each job, and what only the journal knows (delivery, started, deadline) from the journal when
 * it speaks of that same attempt. A job whose journal is gone is treated as dispatched and not
 * yet delivered; its delivery deadline (counted from its message) still applies.
 */
export function rebuildState(records: StoredRecords): FlowState {
  const { flow, journal = {} } = records;
  // A flow keeps its jobs' timeouts in its record, a job outside any flow its own; nothing keeps
  // them when there is no record at all (an empty state, which no deadline reads).
  const timeouts: FlowTimeouts = flow?.timeouts ??
    records.jobs[0]?.timeouts ?? { timeout: MESSAGE_TIMEOUTS.timeout, timeout_ack: MESSAGE_TIMEOUTS.timeout_ack };
  const byId = new Map(records.jobs.map((j) => [j.id, j]));
  const order = flow ? runThenCompensations(flow.jobs, byId) : records.jobs.map((j) => j.id);
  const jobs: JobState[] = [];
  const started = flow ? flow.status !== "dispatched" : true;
  for (const id of order) {
    const record = byId.get(id);
    if (!record) throw new Error(`job ${id} of flow ${flow?.id ?? 0} is missing from storage`);
    const messages = (records.messages.get(id) ?? []).slice().sort((a, b) => (a.attempt ?? 1) - (b.attempt ?? 1));
    const map = record.map_of !== undefined ? byId.get(record.map_of) : undefined;
    jobs.push(jobOf(record, messages[messages.length - 1], journal[id], { timeouts, started }, map));
  }
  linkInstances(jobs);

  const first = records.jobs[0];
  const state: FlowState = {
    id: flow?.id ?? 0,
    contextId: records.contextId,
    callerId: records.callerId,
    status: flow?.status ?? standaloneStatus(first, records.messages.size > 0),
    envVars: flow?.env_vars ?? {},
    timeouts,
    order,
    jobs: linkedTable(jobs),
    ...(flow?.error ? { error: flow.error } : {}),
    traceId: flow?.trace_id ?? "",
    priority: flow?.priority ?? 0,
    ...(flow?.max_parallel !== undefined ? { maxParallel: flow.max_parallel } : {}),
    ...(flow?.template !== undefined ? { template: flow.template } : {}),
    ...(flow?.parent !== undefined ? { parent: flow.parent } : {}),
    ...identityPart(flow),
    ...(flow?.started_at !== undefined ? { startedAt: flow.started_at * 1000 } : {}),
    ...(flow?.compensating_at !== undefined ? { compensatingAt: flow.compensating_at * 1000 } : {}),
    ...(flow?.ended_at !== undefined ? { endedAt: flow.ended_at * 1000 } : {}),
    ...(flow?.run !== undefined ? { run: flow.run } : {}),
    ...(flow?.run_started_at !== undefined ? { runStartedAt: flow.run_started_at * 1000 } : {}),
  };
  if (state.status === "started") restartLost(state, byId);
  return state;
}

/**
 * A flow's order from its stored list: the list holds its jobs as created (compensations last),
 * then the ids of jobs that joined it as they joined (appended: commit-growth.ts); the machine
 * keeps joined jobs before the compensations, which come last (compensation.ts), so they are
 * put back there, each part in its stored order.
 */
function runThenCompensations(stored: number[], records: Map<number, RunnerJob>): number[] {
  const undo = (id: number) => records.get(id)?.compensates !== undefined;
  return [...stored.filter((id) => !undo(id)), ...stored.filter(undo)];
}

/**
 * Waits and sleeps that had started but whose journal entry was lost (the object went away
 * between the commit that started them and the journal's write): their dependencies let them
 * run, so they started when the last of those ended (the flow's start, without any), and their
 * key and deadline follow from that, as when they started. The commit that started a wait put
 * it in the context's index itself, so nothing is owed to Redis.
 */
function restartLost(state: FlowState, records: Map<number, RunnerJob>): void {
  for (const id of state.order) {
    const job = state.jobs.job(id);
    const kind = jobKind(job.spec);
    if (kind === "script" || job.deadline || job.instances || ENDED.has(job.status)) continue;
    const verdict = readiness(state, job);
    if (!verdict || !("run" in verdict)) continue;
    const ends = job.depends.map((dep) => (records.get(dep)?.ended_at ?? 0) * 1000);
    const at = ends.length > 0 ? Math.max(...ends) : (state.startedAt ?? 0);
    // A map that started and had not expanded: it expands now (its deadline is due).
    const attempt = job.attempt + 1;
    const start =
      kind === "map"
        ? { status: "started" as const, attempt, startedAt: at, deadline: { kind: "expand" as const, attempt, at } }
        : noRunnerStart(state, job, at);
    if (!("error" in start)) Object.assign(job, start);
  }
}

/**
 * A map's instances (records that name it in `map_of`) are its, in item order, and have it as
 * their dependent; a map that has instances and has not ended is waiting for them.
 */
function linkInstances(jobs: JobState[]): void {
  const byId = new Map(jobs.map((job) => [job.id, job]));
  for (const instance of jobs) {
    const map = instance.mapOf !== undefined ? byId.get(instance.mapOf) : undefined;
    if (!map) continue;
    instance.dependents.push(map.id);
    (map.instances ??= []).push(instance.id);
  }
  for (const map of jobs) {
    if (!map.instances) continue;
    map.instances.sort((a, b) => (byId.get(a)?.itemIndex ?? 0) - (byId.get(b)?.itemIndex ?? 0));
    if (ENDED.has(map.status)) continue;
    Object.assign(map, { status: "started", attempt: Math.max(map.attempt, 1) });
    delete map.deadline;
  }
}

/**
 * One job as its records tell it: its record (final status, result, end), its newest message
 * (`latest`: the current attempt, and whether it ended), and its journal entry when it speaks of
 * that same attempt (delivery, started, deadline).
 */
function jobOf(
  record: RunnerJob,
  latest: Message | undefined,
  entry: JobJournal | undefined,
  flow: { timeouts: FlowTimeouts; started: boolean },
  map?: RunnerJob,
): JobState {
  const attempt = latest?.attempt ?? 0;
  const notes = entry?.attempt === attempt ? entry : undefined;
  const job: JobState = {
    id: record.id,
    ...(record.name ? { name: record.name } : {}),
    depends: record.depends,
    dependents: [],
    // An instance's record keeps its item; the script and variables are its map's.
    spec: map ? instanceSpecOf(specOf(map), specOf(record)) : specOf(record),
    ...(record.map_of !== undefined ? { mapOf: record.map_of } : {}),
    ...(record.item_index !== undefined ? { itemIndex: record.item_index } : {}),
    ...(record.added_by !== undefined ? { addedBy: record.added_by } : {}),
    messageBase: record.message_base ?? 0,
    status: record.status,
    attempt: Math.max(attempt, record.attempt ?? 0),
    attemptFloor: record.attempt_floor ?? 0,
    ...(record.past_messages ? { pastMessages: record.past_messages as [number, number][] } : {}),
    ...(record.past_children ? { pastChildren: record.past_children } : {}),
  };
  if (ENDED.has(record.status)) {
    if (record.status === "finished") job.result = record.result;
    if (record.error !== undefined) job.error = record.error;
    if (record.skip_reason !== undefined) job.skipReason = record.skip_reason;
    if (record.child_flow_id !== undefined) job.child = record.child_flow_id;
    if (record.latency_ms !== undefined) job.latencyMs = record.latency_ms;
    if (record.duration_ms !== undefined) job.durationMs = record.duration_ms;
    if (record.ended_at !== undefined) job.endedAt = record.ended_at * 1000;
    // Where the last attempt ran (a job that ended without an attempt, its dependency failed, has no runner).
    if (record.last_runner_id !== undefined)
      job.delivery = { runnerId: record.last_runner_id, state: "acknowledged", at: (record.ended_at ?? 0) * 1000 };
  } else if (jobKind(job.spec) !== "script") {
    // A wait, a sleep or a child flow has no message: only the journal tells that it started
    // (else restartLost: a child flow started again asks for the same child, by its attempt).
    const started = entry && entry.attempt > job.attempt ? entry : undefined;
    if (started?.deadline) {
      Object.assign(job, { status: "started", attempt: started.attempt, deadline: started.deadline });
      if (started.startedAt !== undefined) job.startedAt = started.startedAt;
      if (started.waitKey !== undefined) job.waitKey = started.waitKey;
      if (started.child !== undefined) job.child = started.child;
    } else job.status = flow.started && record.depends.length > 0 ? "waiting_for_prerequisites" : "dispatched";
  } else if (attempt > 0 && latest && latest.ended_at !== undefined) {
    // The attempt ended but the job did not: it was waiting out a retry's backoff.
    job.status = "dispatched";
    if (record.error !== undefined) job.error = record.error;
    // Only a retry deadline of the journal belongs here: the journal is written after a commit
    // comes back, so after one whose outcome was unknown it may still hold the attempt's
    // delivery deadline, which would fail the ended attempt again, and again.
    job.deadline =
      notes?.deadline?.kind === "retry" ? notes.deadline : { kind: "retry", attempt, at: latest.ended_at * 1000 };
  } else if (attempt > 0 && latest) {
    job.status = notes?.startedAt !== undefined ? "started" : "dispatched";
    if (notes?.delivery) job.delivery = notes.delivery;
    if (notes?.refused !== undefined) job.refused = notes.refused;
    if (notes?.startedAt !== undefined) job.startedAt = notes.startedAt;
    if (notes?.heartbeatAt !== undefined) job.heartbeatAt = notes.heartbeatAt;
    job.queuedAt = notes?.queuedAt ?? latest.created_at * 1000;
    job.deadline = notes?.deadline ?? {
      kind: "delivery",
      attempt,
      at: (latest.created_at + flow.timeouts.timeout) * 1000,
    };
  } else {
    // A compensation waits for its flow to unwind, and then for the jobs before it.
    const waits = record.depends.length > 0 || record.compensates !== undefined;
    job.status = flow.started && waits ? "waiting_for_prerequisites" : "dispatched";
  }
  return job;
}

/** A job alone is its own flow: started once a message was sent for it, ended when it ended. */
function standaloneStatus(job: RunnerJob | undefined, dispatched: boolean): FlowState["status"] {
  if (job?.status === "finished" || job?.status === "error") return job.status;
  return dispatched ? "started" : "dispatched";
}

/** The identity a flow's record keeps (FlowState.identity), if it has any. */
function identityPart(flow: Flow | null | undefined): { identity?: FlowIdentity } {
  const identity = flow ? identityOf(flow) : undefined;
  return identity ? { identity } : {};
}
