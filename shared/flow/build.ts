import type { EnvVars } from "../model/index.js";
import type { DagJob } from "./dag.js";
import { attemptBlock, type FlowState, type FlowTimeouts, type JobSpec, type JobState } from "./state.js";

interface NewFlow {
  id: number;
  contextId: number;
  callerId: number;
  envVars: EnvVars;
  timeouts: FlowTimeouts;
  traceId: string;
  priority?: number | undefined;
  maxParallel?: number | undefined;
  /** False when the caller has no https address to POST the result to (FlowState.notifyHttps). */
  notifyHttps?: boolean | undefined;
  /** Resolved jobs in submission order. */
  jobs: DagJob[];
  /** First of the message ids reserved for this flow: one per possible attempt of every job. */
  messageBase: number;
}

/** How many message ids a flow (or a re-run) needs: every attempt of every job, and its result message. */
export function messagesNeeded(jobs: Pick<DagJob, "retries">[]): number {
  return jobs.reduce((sum, job) => sum + attemptBlock(job), 0) + 1;
}

/** The jobs a re-run runs again: the failed ones, in submission order. */
export function failedJobs(state: FlowState): number[] {
  return state.order.filter((id) => (state.jobs[id] as JobState).status === "error");
}

/**
 * A fresh block of message ids for each job a re-run runs again, laid out from `first` (the ids
 * `messagesNeeded` counted for them); the id after the last block is the re-run's result message.
 */
export function rerunBases(state: FlowState, first: number): Record<number, number> {
  const bases: Record<number, number> = {};
  let next = first;
  for (const id of failedJobs(state)) {
    bases[id] = next;
    next += attemptBlock((state.jobs[id] as JobState).spec);
  }
  return bases;
}

/** What a job runs, from its submission or its stored record (the same fields in both). */
export function specOf(job: Omit<JobSpec, "runner_id"> & { runner_id?: number | undefined }): JobSpec {
  return {
    script: job.script,
    script_type: job.script_type,
    timeout: job.timeout,
    retries: job.retries,
    env_vars: job.env_vars,
    prerequisites: job.prerequisites,
    ...(job.runner_id !== undefined ? { runner_id: job.runner_id } : {}),
  };
}

/** Fills every job's `dependents` from the others' `depends` (kept for speed, never stored). */
export function linkDependents(jobs: Record<number, JobState>, order: number[]): void {
  for (const id of order) for (const dep of (jobs[id] as JobState).depends) jobs[dep]?.dependents.push(id);
}

/** The machine's state of a flow that was just created (status dispatched, nothing sent yet). */
export function newFlowState(input: NewFlow): FlowState {
  const jobs: Record<number, JobState> = {};
  let nextMessage = input.messageBase;
  for (const job of input.jobs) {
    jobs[job.id] = {
      id: job.id,
      ...(job.name ? { name: job.name } : {}),
      depends: job.depends,
      dependents: [],
      spec: specOf(job),
      messageBase: nextMessage,
      status: "dispatched",
      attempt: 0,
      attemptFloor: 0,
    };
    nextMessage += attemptBlock(job);
  }
  const order = input.jobs.map((j) => j.id);
  linkDependents(jobs, order);
  return {
    id: input.id,
    contextId: input.contextId,
    callerId: input.callerId,
    status: "dispatched",
    envVars: input.envVars,
    timeouts: input.timeouts,
    order,
    jobs,
    traceId: input.traceId,
    priority: input.priority ?? 0,
    ...(input.maxParallel !== undefined ? { maxParallel: input.maxParallel } : {}),
    ...(input.notifyHttps !== undefined ? { notifyHttps: input.notifyHttps } : {}),
  };
}
