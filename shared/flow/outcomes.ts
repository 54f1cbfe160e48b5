import { formatBytes, jsonBytes, SIZE_LIMITS, type ResultMap } from "../model/index.js";
import { backoffMs, dispatch, ENDED, timings, type Draft } from "./draft.js";
import { jobInputs } from "./env.js";
import { jobKey, messageId, type FlowState, type JobState } from "./state.js";

/**
 * A job's attempt reported its result: the job finished, unless the result is too big to keep
 * (`resultRefusal`), in which case the attempt failed saying so. Then dispatch what now can run,
 * maybe end the flow.
 */
export function finish(d: Draft, id: number, result: ResultMap, at: number): void {
  const size = jsonBytes(result);
  const before = flowResultBytes(d.flow);
  const refused = resultRefusal(before, size);
  if (refused) {
    fail(d, id, refused, at, 0.5);
    return;
  }
  const job = d.update(id, {
    status: "finished",
    result,
    deadline: undefined,
    error: undefined,
    ...timings(d.job(id), at),
  });
  d.flow.resultBytes = before + size;
  d.effects.push({ type: "jobEnded", job: id });
  if (d.flow.status !== "started") return;
  for (const dependent of job.dependents) {
    const next = d.job(dependent);
    if (next.status === "waiting_for_prerequisites" && next.depends.every((dep) => d.job(dep).status === "finished")) {
      dispatchReady(d, dependent, at);
    }
  }
  if (d.allFinished()) endFlow(d, at);
}

/**
 * Why a result of `size` bytes cannot be kept, the flow's results being `flowBytes`: bigger than a
 * result may be, or bigger than what is left of the flow's room for results (SIZE_LIMITS, docs/limits.md); undefined when it fits.
 */
function resultRefusal(flowBytes: number, size: number): string | undefined {
  if (size > SIZE_LIMITS.result)
    return `its result is ${formatBytes(size)}, over the limit of ${formatBytes(SIZE_LIMITS.result)} for a result (docs/limits.md)`;
  const total = flowBytes + size;
  if (total > SIZE_LIMITS.flowResults)
    return `its result of ${formatBytes(size)} would take the flow's results to ${formatBytes(total)}, over the limit of ${formatBytes(SIZE_LIMITS.flowResults)} for a flow (docs/limits.md)`;
  return undefined;
}

/**
 * The size of the flow's results together (JSON bytes of every finished job's result), kept in
 * the state from the first time it is needed: a state read back from storage does not carry it.
 */
function flowResultBytes(flow: FlowState): number {
  if (flow.resultBytes !== undefined) return flow.resultBytes;
  let total = 0;
  for (const id of flow.order) {
    const job = flow.jobs[id] as JobState;
    if (job.status === "finished") total += jsonBytes(job.result ?? {});
  }
  return total;
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
  const reason = `not run: its inputs (its dependencies' results) are ${formatBytes(size)}, over the limit of ${formatBytes(SIZE_LIMITS.inputs)} (docs/limits.md)`;
  fail(d, id, reason, at, 0.5);
}

/**
 * An attempt failed. With retries left (while the flow runs), the job waits out a backoff
 * (exponential, full jitter: `random` in [0, 1)) and then runs again as its next attempt,
 * preferably on another runner. Otherwise it fails for good: the flow errors naming it, what
 * depends on it never runs, and it goes to the dead letters.
 */
export function fail(d: Draft, id: number, reason: string, at: number, random: number, undeliverable = false): void {
  const failing = d.job(id);
  // A job that never had an attempt (its inputs were refused) has nothing to retry.
  const retryable =
    failing.attempt > failing.attemptFloor && failing.attempt - failing.attemptFloor <= failing.spec.retries;
  if (d.flow.status === "started" && retryable) {
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
  const flowFails = d.flow.status === "started";
  if (flowFails) {
    d.flow.status = "error";
    d.flow.error = { job: id, ...(job.name ? { name: job.name } : {}), reason };
  }
  // Whatever depended on the failed job can never run: say so on each of them.
  const pending = [...job.dependents];
  while (pending.length > 0) {
    const next = d.job(pending.pop() as number);
    if (next.status !== "waiting_for_prerequisites") continue;
    d.update(next.id, { status: "error", error: `not run: dependency ${jobKey(job)} failed` });
    d.effects.push({ type: "jobEnded", job: next.id });
    pending.push(...next.dependents);
  }
  // A failed flow dispatches nothing more: the jobs still waiting will never run either, and a
  // job waiting out a retry's backoff is not retried.
  if (flowFails) {
    for (const other of d.flow.order) {
      const o = d.job(other);
      const backingOff = o.deadline?.kind === "retry";
      if (o.status !== "waiting_for_prerequisites" && !backingOff) continue;
      d.update(other, {
        status: "error",
        error: backingOff ? o.error : `not run: the flow failed (job ${jobKey(job)})`,
        deadline: undefined,
      });
      d.effects.push({ type: "jobEnded", job: other });
    }
  }
  if (d.flow.endedAt === undefined) endFlow(d, at);
}

function endFlow(d: Draft, at: number): void {
  if (d.flow.status === "started") d.flow.status = "finished";
  d.flow.endedAt = at;
  d.effects.push({ type: "flowEnded" });
}

/**
 * Cancels the flow: nothing more is dispatched, every job not ended errors as cancelled, and
 * each attempt in flight is stopped at its runner. A flow that already failed can still have
 * attempts in flight: those are cancelled the same way.
 */
export function cancel(d: Draft, reason: string, at: number): boolean {
  const why = `cancelled: ${reason}`;
  const wasRunning = !ENDED.has(d.flow.status);
  let changed = wasRunning;
  if (wasRunning) {
    d.flow.status = "error";
    d.flow.error = { job: 0, reason: why };
  }
  for (const id of d.flow.order) {
    const job = d.job(id);
    if (ENDED.has(job.status)) continue;
    changed = true;
    if (job.delivery)
      d.effects.push({ type: "cancelJob", job: id, attempt: job.attempt, runner: job.delivery.runnerId, reason });
    d.update(id, { status: "error", error: why, deadline: undefined });
    d.effects.push({ type: "jobEnded", job: id });
  }
  if (wasRunning) endFlow(d, at);
  return changed;
}

/**
 * Runs a failed flow again from its failed jobs: finished jobs keep their results and are not
 * run again; each failed job gets fresh retries and a fresh block of message ids (`bases`), and
 * runs as soon as its dependencies have finished.
 */
export function rerun(d: Draft, again: number[], bases: Record<number, number>, at: number): void {
  d.flow.status = "started";
  delete d.flow.error;
  delete d.flow.endedAt;
  for (const id of again) {
    const job = d.job(id);
    const used: [number, number][] =
      job.attempt > job.attemptFloor ? [[messageId(job, job.attemptFloor + 1), messageId(job, job.attempt)]] : [];
    d.update(id, {
      status: "waiting_for_prerequisites",
      ...(used.length > 0 ? { pastMessages: [...(job.pastMessages ?? []), ...used] } : {}),
      attemptFloor: job.attempt,
      messageBase: (bases[id] as number) - job.attempt,
      error: undefined,
      deadline: undefined,
      delivery: undefined,
      startedAt: undefined,
      heartbeatAt: undefined,
      latencyMs: undefined,
      durationMs: undefined,
    });
  }
  d.effects.push({ type: "flowRerun", jobs: again });
  for (const id of again) {
    if (d.job(id).status !== "waiting_for_prerequisites") continue; // refused: the flow failed again
    if (d.job(id).depends.every((dep) => d.job(dep).status === "finished")) dispatchReady(d, id, at);
  }
}
