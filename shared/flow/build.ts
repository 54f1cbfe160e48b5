import type { EnvVars } from "../model/index.js";
import type { DagJob } from "./dag.js";
import type { FlowState, FlowTimeouts, JobState } from "./state.js";

export interface NewFlow {
  id: number;
  contextId: number;
  callerId: number;
  envVars: EnvVars;
  timeouts: FlowTimeouts;
  traceId: string;
  /** Resolved jobs in submission order. */
  jobs: DagJob[];
  /** First of the message ids reserved for this flow: one per possible attempt of every job. */
  messageBase: number;
}

/** How many message ids a flow needs: every attempt of every job (1 + retries), and its result message. */
export function messagesNeeded(jobs: Pick<DagJob, "retries">[]): number {
  return jobs.reduce((sum, job) => sum + job.retries + 1, 0) + 1;
}

/** The machine's state of a flow that was just created (status dispatched, nothing sent yet). */
export function newFlowState(input: NewFlow): FlowState {
  const jobs: Record<number, JobState> = {};
  let nextMessage = input.messageBase;
  for (const job of input.jobs) {
    jobs[job.id] = {
      id: job.id,
      ...(job.name ? { name: job.name } : {}),
      dependends: job.dependends,
      dependents: [],
      spec: {
        script: job.script,
        script_type: job.script_type,
        timeout: job.timeout,
        retries: job.retries,
        env_vars: job.env_vars,
        prerequisites: job.prerequisites,
        ...(job.runner_id !== undefined ? { runner_id: job.runner_id } : {}),
      },
      messageBase: nextMessage,
      status: "dispatched",
      attempt: 0,
      attemptFloor: 0,
    };
    nextMessage += job.retries + 1;
  }
  for (const job of input.jobs) for (const dep of job.dependends) (jobs[dep] as JobState).dependents.push(job.id);
  return {
    id: input.id,
    contextId: input.contextId,
    callerId: input.callerId,
    status: "dispatched",
    envVars: input.envVars,
    timeouts: input.timeouts,
    order: input.jobs.map((j) => j.id),
    jobs,
    result: {},
    traceId: input.traceId,
  };
}
