import { jsonBytes, SIZE_LIMITS, type ResultMap } from "../model/index.js";
import { compensations, followers, isCompensation, runLength, unwound } from "./compensation.js";
import { backoffMs, dispatch, ENDED, timings, type Draft } from "./draft.js";
import type { FlowEffect } from "./events.js";
import { jobInputs } from "./env.js";
import { cleanups, readiness, runsAfterFailure } from "./rules.js";
import { jobKind, messageId, type JobState } from "./state.js";
import { addJobs } from "./grow.js";
import { growthNeeds } from "./growth.js";
import { awaitsInstances, mapOutcome } from "./map.js";
import { flowResultBytes, inputsRefusal, resultRefusal } from "./sizes.js";
import { stopForFailure } from "./stop.js";
import { jobStart } from "./work.js";

export { cancelChild } from "./stop.js";

/**
 * A job's attempt reported its result (or a wait took its event, a sleep ended): the job
 * finished, unless the result is too big to keep (`resultRefusal`), in which case the attempt
 * failed saying so. Jobs its result adds (`added`, checked by growth.ts) join the flow with it, in
 * the same transition, while the flow runs; refused, the attempt failed saying why. Then what now
 * can run runs, and the flow may end.
 */
export function finish(
  d: Draft,
  id: number,
  result: ResultMap,
  at: number,
  added?: { jobs: JobState[] } | { error: string },
): void {
  if (added && "error" in added) {
    fail(d, id, `its added jobs were refused: ${added.error}`, at, 0.5);
    return;
  }
  if (!markFinished(d, id, result, at)) return;
  if (!moving(d)) {
    closeMapOf(d, id, at);
    return;
  }
  // A flow that failed runs nothing new: what a late result would add is left out.
  const ended =
    added && d.flow.status === "started" && !d.flow.error ? [id, ...startAdded(d, id, added.jobs, at)] : [id];
  settle(d, ended, at);
  endIfDone(d, at);
}

/**
 * The job finished with `result`, or, the result too big to keep, its attempt failed saying so
 * (false: `fail` took it from there). Its dependents are the caller's to settle.
 */
function markFinished(d: Draft, id: number, result: ResultMap, at: number): boolean {
  const size = jsonBytes(result);
  const before = flowResultBytes(d.flow);
  const refused = resultRefusal(before, size);
  if (refused) {
    fail(d, id, refused, at, 0.5);
    return false;
  }
  d.update(id, {
    status: "finished",
    result,
    deadline: undefined,
    error: undefined,
    ...timings(d.job(id), at),
  });
  d.flow.resultBytes = before + size;
  d.effects.push({ type: "jobEnded", job: id });
  return true;
}

/**
 * Jobs a result of job `by` added join the flow (grow.ts); those without dependencies start now
 * (those that depend on `by` are its dependents, which the caller settles). Returns the ones that
 * ended at once (skipped), whose dependents are the caller's to settle.
 */
function startAdded(d: Draft, by: number, jobs: JobState[], at: number): number[] {
  const ended: number[] = [];
  for (const id of addJobs(d, by, jobs)) {
    if (d.job(id).depends.length === 0 && decide(d, id, at)) ended.push(id);
  }
  return ended;
}

/** Whether the flow still moves on as its jobs end: it runs, or it unwinds. */
function moving(d: Draft): boolean {
  return d.flow.status === "started" || d.flow.status === "compensating";
}

/**
 * The flow starts: each job without dependencies starts (its `when` may skip it), the others
 * wait for theirs, and compensations for the flow to unwind; a job skipped at once settles its
 * dependents.
 */
export function startFlow(d: Draft, at: number): void {
  d.flow.status = "started";
  d.flow.startedAt = at;
  d.effects.push({ type: "flowStarted" });
  const roots: number[] = [];
  for (const id of d.flow.order) {
    const job = d.job(id);
    if (job.depends.length > 0 || isCompensation(job)) d.update(id, { status: "waiting_for_prerequisites" });
    else roots.push(id);
  }
  for (const id of roots) {
    if (d.job(id).status !== "dispatched" || d.flow.status !== "started") continue;
    if (startJob(d, id, at)) settle(d, [id], at);
  }
  endIfDone(d, at);
}

/**
 * Starts a job whose dependencies let it run, as `jobStart` decides (work.ts). True when it was
 * skipped at once by its `when` (its dependents are then the caller's to settle); a job that
 * cannot start fails through `fail`, as any failure.
 */
function startJob(d: Draft, id: number, at: number): boolean {
  const start = jobStart(d.flow, d.job(id), at);
  if ("skip" in start) {
    markSkipped(d, id, start.skip, at);
    return true;
  }
  if ("map" in start) return startMap(d, id, start.map, at);
  if ("fail" in start) fail(d, id, start.fail, at, 0.5);
  else if ("dispatch" in start) dispatchReady(d, id, at);
  else {
    d.update(id, start.noRunner);
    const kind = jobKind(d.job(id).spec);
    if (kind === "flow") d.effects.push({ type: "superviseChild", job: id, attempt: start.noRunner.attempt });
    else d.effects.push({ type: kind === "wait" ? "waitStarted" : "sleepStarted", job: id });
  }
  return false;
}

/**
 * A map starts over its list (map.ts): an empty one finishes it at once with an empty list (true:
 * its dependents are the caller's to settle); else it asks the shell for its instances' ids
 * (`expand`, and a deadline due now should the shell forget) and waits for `expanded`. Its
 * instances all get the map's inputs, checked here once.
 */
function startMap(d: Draft, id: number, items: unknown[], at: number): boolean {
  const job = d.job(id);
  const inputs = jsonBytes(jobInputs(d.flow, job));
  if (inputs > SIZE_LIMITS.inputs) {
    fail(d, id, inputsRefusal(inputs), at, 0.5);
    return false;
  }
  if (items.length === 0) return markFinished(d, id, { items: "[]" }, at);
  const attempt = job.attempt + 1;
  d.update(id, { status: "started", attempt, startedAt: at, deadline: { kind: "expand", attempt, at } });
  const needs = growthNeeds(items.map(() => job.spec));
  d.effects.push({ type: "expand", job: id, jobs: needs.jobs, messages: needs.messages });
  return false;
}

/**
 * A map whose instances all ended ends (map.ts): finished with their results as a list (true:
 * its dependents are the caller's to settle), or in error through `fail` when one failed and the
 * map may not fail. False while an instance still runs.
 */
function closeMap(d: Draft, id: number, at: number): boolean {
  const outcome = mapOutcome(d.flow, d.job(id));
  if (!outcome) return false;
  if ("result" in outcome) return markFinished(d, id, outcome.result, at);
  fail(d, id, outcome.error, at, 0.5);
  return false;
}

/** An instance ended after its flow did: its map ends once its last instance did, all the same. */
function closeMapOf(d: Draft, id: number, at: number): void {
  const map = d.job(id).mapOf;
  if (map !== undefined && awaitsInstances(d.job(map))) closeMap(d, map, at);
}

/** A job is skipped: it did not run, by its flow's rules, and `reason` says why. */
export function markSkipped(d: Draft, id: number, reason: string, at: number): void {
  d.update(id, {
    status: "skipped",
    skipReason: reason,
    deadline: undefined,
    error: undefined,
    ...timings(d.job(id), at),
  });
  d.effects.push({ type: "jobEnded", job: id });
}

/** Skips a job and settles what depends on it (a wait that timed out with `on_timeout: skip`). */
export function skip(d: Draft, id: number, reason: string, at: number): void {
  markSkipped(d, id, reason, at);
  if (!moving(d)) return;
  settle(d, [id], at);
  endIfDone(d, at);
}

/**
 * Once job `from` ended, each of its dependents still waiting is decided by its rules
 * (rules.ts: run, skip, or wait on), and while the flow unwinds its compensation too: a skip
 * ends it too, so its own dependents are decided in turn (a worklist, not recursion: a chain of
 * 1,000 skips is 1,000 turns of a loop).
 */
function settle(d: Draft, from: number[], at: number): void {
  const ended = [...from];
  while (ended.length > 0) {
    for (const id of followers(d.flow, d.job(ended.pop() as number))) {
      const next = d.job(id);
      // A map waits for its instances (their dependent), even once the flow failed.
      if (awaitsInstances(next)) {
        if (closeMap(d, id, at)) ended.push(id);
        continue;
      }
      if (next.status !== "waiting_for_prerequisites") continue;
      if (d.flow.error && !runsAfterFailure(next) && !isCompensation(next)) continue;
      if (decide(d, id, at)) ended.push(id);
    }
  }
}

/**
 * Decides a waiting job by its rules (rules.ts): skipped, started (and maybe skipped at once by
 * its `when`), or left waiting. True when it ended, so its dependents are to be decided in turn.
 */
function decide(d: Draft, id: number, at: number): boolean {
  const verdict = readiness(d.flow, d.job(id));
  if (verdict === undefined) return false;
  if (!("skip" in verdict)) return startJob(d, id, at);
  markSkipped(d, id, verdict.skip, at);
  return true;
}

/**
 * Ends the flow's run once nothing that matters is left: every job ended, or, the flow having
 * failed, no clean-up job (`needs: all_done`) is left to run. Attempts still in flight then run
 * on (as they do when a flow fails) and their results are kept, but the flow has its end; or,
 * a failed flow with compensations, it unwinds (and waits for them: their compensations run
 * if they finish). Compensations not needed (the flow finished) are skipped. An unwinding flow
 * ends once every job ended.
 */
function endIfDone(d: Draft, at: number): void {
  if (d.flow.endedAt !== undefined) return;
  if (d.flow.status === "compensating") {
    if (d.allEnded()) endFlow(d, at);
    return;
  }
  const over = d.allEnded(runLength(d.flow));
  if (!over && (!d.flow.error || cleanups(d.flow).some((id) => !ENDED.has(d.job(id).status)))) return;
  if (d.flow.error && compensations(d.flow).length > 0) {
    unwind(d, at);
    return;
  }
  for (const id of compensations(d.flow)) markSkipped(d, id, "not needed: the flow finished", at);
  endFlow(d, at);
}

/**
 * The flow unwinds (it failed, or was cancelled with `compensate`): each compensation is
 * decided by its rules (compensation.ts) as the jobs it waits for end, the first ones now.
 */
export function unwind(d: Draft, at: number): void {
  d.flow.status = "compensating";
  d.flow.compensatingAt = at;
  d.effects.push({ type: "flowCompensating" });
  const ended: number[] = [];
  for (const id of compensations(d.flow)) {
    if (ENDED.has(d.job(id).status)) continue;
    // A flow cancelled before it started left them as created.
    if (d.job(id).status !== "waiting_for_prerequisites") d.update(id, { status: "waiting_for_prerequisites" });
    if (decide(d, id, at)) ended.push(id);
  }
  settle(d, ended, at);
  endIfDone(d, at);
}

/**
 * Runs a job whose dependencies all finished: dispatched, unless its inputs (its dependencies'
 * results, as its `FLOW_INPUTS`) are bigger than a job may be given, in which case it fails
 * for good without running, saying so.
 */
export function dispatchReady(d: Draft, id: number, at: number): void {
  const size = jsonBytes(jobInputs(d.flow, d.job(id)));
  if (size <= SIZE_LIMITS.inputs) {
    dispatch(d, id, at);
    return;
  }
  fail(d, id, inputsRefusal(size), at, 0.5);
}

/**
 * An attempt failed. With retries left (while the flow runs), the job waits out a backoff
 * (exponential, full jitter: `random` in [0, 1)) and then runs again as its next attempt,
 * preferably on another runner. Otherwise it fails for good and goes to the dead letters. Unless
 * it may fail (`allow_failure`), the flow fails with it (`stopForFailure`); either way its
 * dependents are decided by their rules, and the flow ends once nothing that matters is left.
 */
export function fail(d: Draft, id: number, reason: string, at: number, random: number, undeliverable = false): void {
  const failing = d.job(id);
  // A job that never had an attempt (its inputs were refused) has nothing to retry.
  // A map is never retried itself: its retries are its instances'.
  const retryable =
    failing.spec.map === undefined &&
    failing.attempt > failing.attemptFloor &&
    failing.attempt - failing.attemptFloor <= failing.spec.retries;
  const running =
    (d.flow.status === "started" && (!d.flow.error || runsAfterFailure(failing))) ||
    (d.flow.status === "compensating" && isCompensation(failing));
  if (running && retryable) {
    d.effects.push({ type: "attemptFailed", job: id, attempt: failing.attempt });
    d.update(id, {
      status: "dispatched",
      error: reason,
      delivery: undefined,
      startedAt: undefined,
      heartbeatAt: undefined,
      previousRunner: failing.delivery?.runnerId,
      deadline: { kind: "retry", attempt: failing.attempt, at: at + backoffMs(d.flow, failing, random) },
    });
    return;
  }
  const job = d.update(id, { status: "error", error: reason, deadline: undefined, ...timings(failing, at) });
  d.effects.push({ type: "jobEnded", job: id });
  d.effects.push({ type: "deadLetter", job: id, kind: undeliverable ? "undeliverable" : "job", reason });
  if (!moving(d)) {
    closeMapOf(d, id, at);
    return;
  }
  let stopped: number[] = [];
  if (d.flow.status === "started" && !job.spec.allow_failure && !d.flow.error) {
    d.flow.error = { job: id, ...(job.name ? { name: job.name } : {}), reason };
    stopped = stopForFailure(d, job, at);
  }
  settle(d, [id, ...stopped], at);
  endIfDone(d, at);
}

/** The flow ends: how it ran (finished, error) or unwound (compensated, compensation_failed). */
export function endFlow(d: Draft, at: number): void {
  if (d.flow.status === "started") d.flow.status = d.flow.error ? "error" : "finished";
  else if (d.flow.status === "compensating") Object.assign(d.flow, unwound(d.flow));
  d.flow.endedAt = at;
  d.effects.push({ type: "flowEnded" });
}

/**
 * Runs the flow again: the jobs `again` (rerun.ts decides which) forget how they ended, each
 * gets fresh retries and a fresh block of message ids (`bases`), and runs once its rules let it;
 * every other job keeps its status and result. `info` is what the flowRerun effect tells. A flow
 * whose unwinding failed unwinds again from its failed compensations, its error kept.
 */
export function rerun(
  d: Draft,
  again: number[],
  bases: Record<number, number>,
  at: number,
  info: Omit<Extract<FlowEffect, { type: "flowRerun" }>, "type" | "jobs">,
): void {
  if (d.flow.status === "compensation_failed" && d.flow.error) {
    const { failed_compensations: _failed, ...error } = d.flow.error;
    d.flow.status = "compensating";
    d.flow.error = error;
  } else {
    d.flow.status = "started";
    delete d.flow.error;
  }
  delete d.flow.endedAt;
  d.flow.runStartedAt = at;
  for (const id of again) {
    const job = d.job(id);
    const used: [number, number][] =
      job.attempt > job.attemptFloor ? [[messageId(job, job.attemptFloor + 1), messageId(job, job.attempt)]] : [];
    d.update(id, {
      // A map that expanded waits for its instances again (those that failed run again).
      status: job.instances ? "started" : "waiting_for_prerequisites",
      ...(used.length > 0 ? { pastMessages: [...(job.pastMessages ?? []), ...used] } : {}),
      ...(job.child !== undefined ? { pastChildren: [...(job.pastChildren ?? []), job.child] } : {}),
      attemptFloor: job.attempt,
      messageBase: (bases[id] as number) - job.attempt,
      error: undefined,
      skipReason: undefined,
      waitKey: undefined,
      child: undefined,
      result: undefined,
      deadline: undefined,
      delivery: undefined,
      startedAt: undefined,
      heartbeatAt: undefined,
      latencyMs: undefined,
      durationMs: undefined,
      endedAt: undefined,
    });
  }
  d.effects.push({ type: "flowRerun", jobs: again, ...info });
  for (const id of again) {
    const job = d.job(id);
    if (!moving(d)) continue; // the flow failed again
    if (awaitsInstances(job)) {
      if (closeMap(d, id, at)) settle(d, [id], at); // none of its instances runs again
    } else if (job.status === "waiting_for_prerequisites" && decide(d, id, at)) settle(d, [id], at);
  }
  endIfDone(d, at);
}
