import type { EnvVars, FlowIdentity, FlowOrigin, FlowParent } from "../model/index.js";
import type { DagJob } from "./dag.js";
import { JobTable } from "./job-table.js";
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
  /** The template and version it was started from (FlowState.template). */
  template?: FlowOrigin | undefined;
  /** The job that started it, for a child flow (FlowState.parent). */
  parent?: FlowParent | undefined;
  /** Its name, labels and schedule (FlowState.identity), when it has any. */
  identity?: FlowIdentity | undefined;
  /** Resolved jobs in submission order. */
  jobs: DagJob[];
  /** First of the message ids reserved for this flow: one per possible attempt of every job. */
  messageBase: number;
}

/** How many message ids a flow (or a re-run) needs: every attempt of every job, and its result message. */
export function messagesNeeded(jobs: Pick<DagJob, "retries">[]): number {
  return jobs.reduce((sum, job) => sum + attemptBlock(job), 0) + 1;
}

/** What a job runs, from its submission or its stored record (the same fields in both). */
export function specOf(
  job: { [K in keyof JobSpec]?: JobSpec[K] | undefined } & Pick<
    JobSpec,
    "timeout" | "retries" | "env_vars" | "prerequisites"
  >,
): JobSpec {
  return {
    script: job.script ?? "",
    ...(job.script_type !== undefined ? { script_type: job.script_type } : {}),
    timeout: job.timeout,
    retries: job.retries,
    env_vars: job.env_vars,
    prerequisites: job.prerequisites,
    ...(job.runner_id !== undefined ? { runner_id: job.runner_id } : {}),
    ...(job.wait !== undefined ? { wait: job.wait } : {}),
    ...(job.map !== undefined ? { map: job.map } : {}),
    ...(job.sleep !== undefined ? { sleep: job.sleep } : {}),
    ...(job.sleep_until !== undefined ? { sleep_until: job.sleep_until } : {}),
    ...(job.flow !== undefined ? { flow: job.flow } : {}),
    ...(job.when !== undefined ? { when: job.when } : {}),
    ...(job.needs !== undefined && job.needs !== "all_finished" ? { needs: job.needs } : {}),
    ...(job.allow_failure ? { allow_failure: true } : {}),
    ...(job.compensates !== undefined ? { compensates: job.compensates } : {}),
  };
}

/**
 * The table of a flow's new job objects, in its order: fills every job's `dependents` from the
 * others' `depends`, and a job's `compensation` from its compensation's `compensates`, first
 * (kept for speed, never stored), in place, as the objects are new.
 */
export function linkedTable(jobs: JobState[]): JobTable<JobState> {
  const byId = new Map(jobs.map((job) => [job.id, job]));
  for (const job of jobs) {
    for (const dep of job.depends) byId.get(dep)?.dependents.push(job.id);
    const target = job.spec.compensates !== undefined ? byId.get(job.spec.compensates) : undefined;
    if (target) target.compensation = job.id;
  }
  return JobTable.of(jobs);
}

/** The machine's state of a flow that was just created (status dispatched, nothing sent yet). */
export function newFlowState(input: NewFlow): FlowState {
  const jobs: JobState[] = [];
  let nextMessage = input.messageBase;
  for (const job of input.jobs) {
    jobs.push({
      id: job.id,
      ...(job.name ? { name: job.name } : {}),
      depends: job.depends,
      dependents: [],
      spec: specOf(job),
      messageBase: nextMessage,
      status: "dispatched",
      attempt: 0,
      attemptFloor: 0,
    });
    nextMessage += attemptBlock(job);
  }
  return {
    id: input.id,
    contextId: input.contextId,
    callerId: input.callerId,
    status: "dispatched",
    envVars: input.envVars,
    timeouts: input.timeouts,
    order: input.jobs.map((j) => j.id),
    jobs: linkedTable(jobs),
    traceId: input.traceId,
    priority: input.priority ?? 0,
    ...(input.maxParallel !== undefined ? { maxParallel: input.maxParallel } : {}),
    ...(input.notifyHttps !== undefined ? { notifyHttps: input.notifyHttps } : {}),
    ...(input.template !== undefined ? { template: input.template } : {}),
    ...(input.parent !== undefined ? { parent: input.parent } : {}),
    ...(input.identity !== undefined ? { identity: input.identity } : {}),
  };
}
