import { z } from "zod";
import { attemptBlock, jobKey, type FlowState, type JobState } from "./state.js";
import { specOf } from "./build.js";
import { findCycle, mapIssue } from "./dag.js";
import type { GrowthIds } from "./events.js";
import { FLOW_LIMITS, FlowJobInput, type JobRef } from "./submission.js";

/**
 * Jobs a job's result adds to its own flow (docs/flows.md, "Added jobs"): checked as a
 * submission's jobs are (the flow file's schema, names, dependencies, cycles, maps, the flow's
 * job limit) against the flow as it is, and made into jobs of the machine. Pure: the shell
 * allocates their ids first (`GrowthIds`) and checks what needs storage (the flow's actor may
 * still submit, pinned runners exist) before it sends the report.
 */

export type { GrowthIds } from "./events.js";

/** What jobs being added need: a job id each, and message ids as a flow's jobs do (messagesNeeded). */
export function growthNeeds(jobs: { retries: number }[]): { jobs: number; messages: number } {
  return { jobs: jobs.length, messages: jobs.reduce((sum, job) => sum + attemptBlock(job), 0) + 1 };
}

const AddedJobs = z.array(FlowJobInput);

/**
 * Added jobs as a flow file's jobs, or why they are not: the first few schema issues, each naming
 * its field (`jobs.2.script_type: …`). An `id` is refused: the coordinator gives added jobs theirs;
 * so is a `compensate` (a compensation is a job laid out when the flow is submitted).
 */
export function parseAddedJobs(raw: unknown[]): { jobs: FlowJobInput[] } | { error: string } {
  const parsed = AddedJobs.safeParse(raw);
  if (!parsed.success) {
    const issues = parsed.error.issues.slice(0, 3).map((issue) => `jobs.${issue.path.join(".")}: ${issue.message}`);
    return { error: issues.join("; ") };
  }
  const chosen = parsed.data.findIndex((job) => job.id !== undefined);
  if (chosen >= 0)
    return { error: `jobs.${chosen}.id: added jobs are given ids by the coordinator; name them instead` };
  // A compensation is a job of its own, laid out after the flow's when it is submitted (dag.ts).
  const undoing = parsed.data.findIndex((job) => job.compensate !== undefined);
  if (undoing >= 0)
    return { error: `jobs.${undoing}.compensate: an added job cannot have a compensation; give it in the flow file` };
  return { jobs: parsed.data };
}

/** A job's names in `depends` and `map.over`: its name, and its id. */
function refsOf(job: { id: number; name?: string | undefined }): string[] {
  return job.name !== undefined ? [job.name, String(job.id)] : [String(job.id)];
}

/**
 * What an added job's dependency may be: a job added with it, the job that adds it (ending now),
 * or a job of the flow that has not started (waiting for its own dependencies). A job that runs
 * or ended cannot be waited for by a newcomer without changing what it was run with.
 */
function dependable(by: number, job: JobState): boolean {
  return job.id === by || job.status === "waiting_for_prerequisites";
}

/**
 * The jobs `jobs` (parsed: parseAddedJobs) add to the flow, job `by` bringing them with its result, with the ids `ids`
 * laid out in order (job ids from `ids.job`, a block of message ids each from `ids.message`), or
 * why they cannot be added. They start waiting for their dependencies; the caller links them
 * and decides them (outcomes.ts).
 */
export function addedJobs(
  flow: FlowState,
  by: number,
  jobs: FlowJobInput[],
  ids: GrowthIds,
): { jobs: JobState[] } | { error: string } {
  const total = flow.order.length + jobs.length;
  if (total > FLOW_LIMITS.jobsPerFlow)
    return {
      error: `they would take the flow to ${total} jobs, over the limit of ${FLOW_LIMITS.jobsPerFlow} (docs/limits.md)`,
    };
  const existing = new Map<string, JobState>();
  for (const id of flow.order) {
    const job = flow.jobs.job(id);
    for (const ref of refsOf(job)) existing.set(ref, job);
  }
  const fresh = new Map<string, number>();
  for (const [i, job] of jobs.entries()) {
    const name = job.name;
    if (name === undefined) continue;
    if (existing.has(name)) return { error: `jobs.${i}.name: the flow has a job named ${name} already` };
    if (fresh.has(name)) return { error: `jobs.${i}.name: duplicate name ${name} (also jobs.${fresh.get(name)})` };
    fresh.set(name, i);
  }
  const edges: number[][] = jobs.map(() => []);
  const depends: number[][] = jobs.map(() => []);
  for (const [i, job] of jobs.entries()) {
    for (const [d, ref] of job.depends.entries()) {
      const found = resolveRef(by, ref, fresh, existing, ids.job);
      if ("error" in found) return { error: `jobs.${i}.depends.${d}: ${found.error}` };
      if (found.fresh !== undefined) (edges[i] as number[]).push(found.fresh);
      if (!(depends[i] as number[]).includes(found.id)) (depends[i] as number[]).push(found.id);
    }
  }
  const cycle = findCycle(edges);
  if (cycle) {
    const names = [...cycle, cycle[0] as number].map((i) => jobs[i]?.name ?? `jobs[${i}]`);
    return { error: `they form a dependency cycle: ${names.join(" → ")} (→ reads "depends on")` };
  }
  const made = jobs.map((job, i) => ({ ...job, id: ids.job + i }));
  for (const [i, job] of made.entries()) {
    const deps = (depends[i] as number[]).map((id) =>
      refsOf(id >= ids.job ? (made[id - ids.job] as { id: number }) : flow.jobs.job(id)),
    );
    const issue = mapIssue(job, i, deps);
    if (issue) return { error: `${issue.field}: ${issue.message}` };
  }
  let message = ids.message;
  return {
    jobs: made.map((job, i) => {
      const state: JobState = {
        id: job.id,
        ...(job.name !== undefined ? { name: job.name } : {}),
        depends: depends[i] as number[],
        dependents: [],
        spec: specOf(job),
        messageBase: message,
        status: "waiting_for_prerequisites",
        attempt: 0,
        attemptFloor: 0,
        addedBy: by,
      };
      message += attemptBlock(job);
      return state;
    }),
  };
}

/** One reference of an added job's `depends`: a job added with it (by name), or one of the flow. */
function resolveRef(
  by: number,
  ref: JobRef,
  fresh: Map<string, number>,
  existing: Map<string, JobState>,
  firstId: number,
): { id: number; fresh?: number } | { error: string } {
  const key = String(ref);
  const index = typeof ref === "string" ? fresh.get(ref) : undefined;
  if (index !== undefined) return { id: firstId + index, fresh: index };
  const job = existing.get(key);
  if (!job) return { error: `${JSON.stringify(ref)} is neither a job of this flow nor one added with it` };
  if (!dependable(by, job))
    return {
      error: `${jobKey(job)} has started (${job.status}): an added job may depend on jobs added with it, on the job that adds it, and on jobs that have not started`,
    };
  return { id: job.id };
}

/** A report that ends an attempt as finished, maybe bringing jobs to add. */
type Finished = { jobs?: unknown[] | undefined; ids?: GrowthIds | undefined; refused?: string | undefined };

/**
 * What a finished report's added jobs come to on `flow`, job `by` reporting: nothing (it brings
 * none, or the flow no longer runs: a flow that failed or ended runs nothing new, so they are left
 * out), the jobs to add, why they are refused (a job outside any flow adds none), or `unallocated`: well-formed, but the shell has not
 * allocated their ids (it asks this too, before it allocates: `growthWanted`).
 */
export function addedOf(
  flow: FlowState,
  by: number,
  event: Finished,
): { jobs: JobState[] } | { error: string } | "unallocated" | undefined {
  if (!event.jobs || event.jobs.length === 0 || flow.status !== "started" || flow.error) return undefined;
  if (event.refused !== undefined) return { error: event.refused };
  // A job outside any flow has no flow to add to (nor a flow record to list them in).
  if (flow.id === 0) return { error: "a job outside any flow cannot add jobs: submit a flow" };
  const parsed = parseAddedJobs(event.jobs);
  if ("error" in parsed) return parsed;
  if (!event.ids) return "unallocated";
  return addedJobs(flow, by, parsed.jobs, event.ids);
}

/**
 * The jobs a finished report brings that the shell must check and allocate ids for before the
 * machine takes it (parsed), or undefined: none, the flow no longer runs, or they do not parse
 * (the machine refuses them itself, with no ids).
 */
export function growthWanted(flow: FlowState, event: Finished): FlowJobInput[] | undefined {
  if (!event.jobs || event.jobs.length === 0 || flow.status !== "started" || flow.error || flow.id === 0)
    return undefined;
  const parsed = parseAddedJobs(event.jobs);
  return "jobs" in parsed ? parsed.jobs : undefined;
}
