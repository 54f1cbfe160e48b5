import type { EnvVars } from "../model/index.js";
import { compensations, isCompensation } from "./compensation.js";
import { Draft, ENDED } from "./draft.js";
import { unchanged, type FlowEvent, type Transition } from "./events.js";
import { rerun } from "./outcomes.js";
import { attemptBlock, jobKey, type FlowState } from "./state.js";

/**
 * Re-runs of a flow, pure. A failed flow runs again from its failed jobs (one whose unwinding
 * failed, from its failed compensations); with `from`, a flow that ended (finished or error)
 * runs again from that job: it and everything downstream of it, whatever their status, while
 * what is upstream keeps its result. Each re-run is the flow's next
 * run (`FlowState.run`), and may change the flow's env from then on.
 */

/** Which run of the flow this is: 1 for the first, one more for each re-run. */
export function currentRun(state: Pick<FlowState, "run">): number {
  return state.run ?? 1;
}

/** `roots` and every job that depends on one of them, at any depth; a map's instances are part of it. */
function downstreamOf(state: FlowState, roots: number[]): Set<number> {
  const out = new Set<number>();
  const pending = [...roots];
  while (pending.length > 0) {
    const id = pending.pop() as number;
    if (out.has(id)) continue;
    out.add(id);
    const job = state.jobs.job(id);
    pending.push(...job.dependents, ...(job.instances ?? []));
  }
  return out;
}

/**
 * The jobs a re-run runs again, in submission order. A failed flow's failed jobs, and those
 * skipped because of them (downstream of a failed job: their rules may let them run once it
 * finishes). With `from`: that job and everything downstream of it too, whatever their status
 * (for a failed flow together with its failures, which would fail it again if left as they are).
 * With them, the flow's compensations, which wait again for the flow to unwind. A flow whose
 * unwinding failed (compensation_failed) runs again its failed compensations only (and those
 * skipped because of them): it unwinds on.
 */
export function rerunJobs(state: FlowState, from?: number): number[] {
  const unwinding = state.status === "compensation_failed";
  const again = from === undefined ? new Set<number>() : downstreamOf(state, [from]);
  if (!unwinding) for (const id of compensations(state)) again.add(id);
  if (state.status === "error" || unwinding) {
    const failed: number[] = [];
    for (const id of state.order) {
      const job = state.jobs.job(id);
      if (job.status === "error" && isCompensation(job) === unwinding) failed.push(id);
    }
    for (const id of failed) again.add(id);
    const pending = [...failed];
    while (pending.length > 0) {
      for (const next of state.jobs.job(pending.pop() as number).dependents) {
        if (again.has(next) || state.jobs.job(next).status !== "skipped") continue;
        again.add(next);
        pending.push(next);
      }
    }
  }
  return state.order.filter((id) => again.has(id));
}

/**
 * A fresh block of message ids for each job a re-run runs again, laid out from `first` (the ids
 * `messagesNeeded` counted for them); the id after the last block is the re-run's result message.
 */
export function rerunBases(state: FlowState, first: number, from?: number): Record<number, number> {
  const bases: Record<number, number> = {};
  let next = first;
  for (const id of rerunJobs(state, from)) {
    bases[id] = next;
    next += attemptBlock(state.jobs.job(id).spec);
  }
  return bases;
}

/** What a re-run asks, as the machine checks it (the shell checks the same before taking ids). */
export interface RerunAsk {
  /** The job to re-run from (an id of the flow), if any. */
  from?: number | undefined;
  /** The run the caller means to replace, if it says. */
  run?: number | undefined;
}

/**
 * Why the flow cannot be re-run as asked, or undefined when it can: another run than the one the
 * caller read (a repeated request, or another admin's re-run), a flow that did not fail
 * (without `from`) or has not ended (with it), or a job to run again whose attempt is still in
 * flight (a failed flow runs its other attempts on: cancel it first, or wait for them).
 */
export function rerunRefusal(state: FlowState, ask: RerunAsk): string | undefined {
  const run = currentRun(state);
  if (ask.run !== undefined && ask.run !== run)
    return `is at run ${run}, not ${ask.run}: it was re-run since (a repeated request, or another's)`;
  if (ask.from === undefined)
    return state.status === "error" || state.status === "compensation_failed"
      ? undefined
      : `is ${state.status}: only a failed one can be re-run`;
  if (!state.jobs.has(ask.from)) return `has no job ${ask.from}`;
  if (state.status === "compensated" || state.status === "compensation_failed")
    return `is ${state.status}: a flow that unwound is not re-run from a job (submit it again)`;
  if (isCompensation(state.jobs.job(ask.from))) return `cannot be re-run from a compensation`;
  if (state.status !== "finished" && state.status !== "error")
    return `is ${state.status}: it can be re-run from a job once it ended (cancel it first)`;
  for (const id of rerunJobs(state, ask.from)) {
    const job = state.jobs.job(id);
    if (!ENDED.has(job.status))
      return `still runs job ${jobKey(job)} (attempt ${job.attempt}), which a re-run from ${jobKey(state.jobs.job(ask.from))} would run again: cancel the flow first, or wait for it`;
  }
  return undefined;
}

/** The flow's env with a re-run's variables over it. */
export function rerunEnv(state: FlowState, env: EnvVars | undefined): EnvVars {
  return env === undefined ? state.envVars : { ...state.envVars, ...env };
}

/**
 * The `rerun` event: refused (changing nothing) as `rerunRefusal` says, or when a job to run
 * again has no fresh message ids; otherwise the flow's next run starts, with its env changed.
 */
export function reRun(state: FlowState, event: Extract<FlowEvent, { type: "rerun" }>): Transition {
  const refused = rerunRefusal(state, event);
  if (refused !== undefined) return unchanged(state, "not-applicable", `the flow ${refused}`);
  const again = rerunJobs(state, event.from);
  const missing = again.find((id) => event.bases[id] === undefined);
  if (missing !== undefined) return unchanged(state, "not-applicable", `no message ids for job ${missing}`);
  const d = new Draft(state);
  // A job outside any flow has no record to keep a run number in.
  if (state.id !== 0) d.flow.run = currentRun(state) + 1;
  if (event.env !== undefined) d.flow.envVars = rerunEnv(state, event.env);
  // Results of jobs run again no longer count towards the flow's room for results.
  delete d.flow.resultBytes;
  rerun(d, again, event.bases, event.at, {
    was: state.status,
    ...(event.from !== undefined ? { from: event.from } : {}),
    ...(event.env !== undefined ? { env: Object.keys(event.env) } : {}),
  });
  return d.done();
}
