import { evaluateCondition, type ConditionVars } from "./expression.js";
import { jobEnvironment, jobResults } from "./env.js";
import { mapItems } from "./map.js";
import { jobKey, jobKind, type FlowState, type JobState } from "./state.js";
import { parseTime } from "./sleep-deadline.js";
import { inputsOfEnv } from "./inputs.js";
import { resolveTemplate } from "./template.js";
import { MAX_CHILD_DEPTH } from "../model/child.js";

/**
 * What a job does once its flow's rules let it run: its `when` decides whether it runs at all,
 * then a script is dispatched to a runner, a wait starts waiting for its event, a sleep starts
 * sleeping, a child-flow job starts its child. Those take no runner: a deadline of the flow's
 * object ends them (and an event, a wait; the child's end, a child flow), never a timer in memory.
 */

/** What a `when` reads: the dependencies' results and statuses, the flow's and the job's env. */
export function conditionVars(flow: FlowState, job: JobState): ConditionVars {
  const status: Record<string, string> = {};
  for (const id of job.depends) {
    const dep = flow.jobs.job(id);
    status[jobKey(dep)] = dep.status;
  }
  const env = { ...flow.envVars, ...job.spec.env_vars };
  return { deps: jobResults(flow, job), status, env, inputs: inputsOfEnv(env) };
}

/**
 * What starting a job whose dependencies let it run comes to: skip it (its `when` is false),
 * fail it (a `when` that cannot be evaluated, a wait's key or a sleep's time that cannot be
 * resolved, a map's list that is not one), dispatch it to a runner (a script), start it without
 * one (a wait, a sleep), or expand it over its list (a map, map.ts).
 * Pure: `startJob` (outcomes.ts) carries it out.
 */
export type JobStart =
  { skip: string } | { fail: string } | { dispatch: true } | { noRunner: NoRunnerStart } | { map: unknown[] };

export function jobStart(flow: FlowState, job: JobState, at: number): JobStart {
  if (job.spec.when !== undefined) {
    const verdict = evaluateCondition(job.spec.when, conditionVars(flow, job));
    if ("error" in verdict) return { fail: `when could not be evaluated: ${verdict.error}` };
    if (!verdict.value) return { skip: `when is false: ${shorten(job.spec.when)}` };
  }
  const kind = jobKind(job.spec);
  if (kind === "script") return { dispatch: true };
  if (kind === "map") {
    const list = mapItems(flow, job);
    return "error" in list ? { fail: list.error } : { map: list.items };
  }
  const start = noRunnerStart(flow, job, at);
  return "error" in start ? { fail: start.error } : { noRunner: start };
}

/** An expression as a reason quotes it: at most 200 characters (a skip reason is kept per job). */
function shorten(text: string): string {
  return text.length > 200 ? `${text.slice(0, 200)}…` : text;
}

/** What a job that takes no runner is once started at `at`: its status, deadline (and a wait's key). */
export type NoRunnerStart = Pick<JobState, "status" | "attempt" | "startedAt" | "deadline" | "waitKey">;

/** How often a running child-flow job looks at its child (the child tells its end; this finds an end whose telling was lost). */
export const CHILD_POLL_MS = 60_000;

/**
 * How a wait or a sleep starts at `at`, or why it cannot: a wait's key resolved (its timeout
 * its deadline), a sleep's end. Pure, and shared by the machine and by a rebuild that finds a
 * started one whose journal was lost (rebuild.ts).
 */
export function noRunnerStart(flow: FlowState, job: JobState, at: number): NoRunnerStart | { error: string } {
  const attempt = job.attempt + 1;
  if (job.spec.flow) return childStart(flow, job, attempt, at);
  const wait = job.spec.wait;
  if (wait) {
    const key = resolveTemplate(wait.key, jobEnvironment(flow, job));
    if ("error" in key) return { error: `its wait's key could not be resolved: ${key.error}` };
    const deadline = { kind: "wait" as const, attempt, at: at + wait.timeout * 1000 };
    return { status: "started", attempt, startedAt: at, waitKey: key.value, deadline };
  }
  const end = sleepEnd(flow, job, at);
  if ("error" in end) return end;
  return { status: "started", attempt, startedAt: at, deadline: { kind: "sleep", attempt, at: end.at } };
}

/**
 * How a child-flow job starts: its next look at the child is its deadline (the shell starts the
 * child, see superviseChild). A flow as deep as flows may nest starts none (MAX_CHILD_DEPTH).
 */
function childStart(flow: FlowState, job: JobState, attempt: number, at: number): NoRunnerStart | { error: string } {
  const depth = (flow.parent?.depth ?? 0) + 1;
  if (depth > MAX_CHILD_DEPTH)
    return {
      error: `a child flow would be ${depth} deep, past the limit of ${MAX_CHILD_DEPTH} flows nested (docs/limits.md)`,
    };
  return { status: "started", attempt, startedAt: at, deadline: { kind: "child", attempt, at: nextLook(job, at, at) } };
}

/**
 * When a running child-flow job next looks at its child: a minute from `at`, or the end of its
 * `flow.timeout` (counted from `startedAt`) when that comes first.
 */
export function nextLook(job: Pick<JobState, "spec">, startedAt: number, at: number): number {
  const timeout = job.spec.flow?.timeout;
  const poll = at + CHILD_POLL_MS;
  return timeout === undefined ? poll : Math.min(poll, startedAt + timeout * 1000);
}

/** Whether a running child-flow job's `flow.timeout` has passed at `at`. */
export function childTimedOut(job: Pick<JobState, "spec" | "startedAt">, at: number): boolean {
  const timeout = job.spec.flow?.timeout;
  return timeout !== undefined && job.startedAt !== undefined && at >= job.startedAt + timeout * 1000;
}

/**
 * When a sleep ends, or why it cannot: a time that is not one, or past the flow's deadline (a
 * sleep that would outlast its flow fails at its start, saying so, rather than holding the flow
 * until the deadline fails it all: with `allow_failure` the flow goes on).
 */
function sleepEnd(flow: FlowState, job: JobState, at: number): { at: number } | { error: string } {
  if (job.spec.sleep !== undefined) {
    const end = at + job.spec.sleep * 1000;
    const deadline = flowDeadline(flow);
    if (deadline !== undefined && end > deadline)
      return {
        error: `a sleep of ${job.spec.sleep} s from now would end past the flow's deadline (timeouts.flow: ${flow.timeouts.flow} s)`,
      };
    return { at: end };
  }
  const text = resolveTemplate(job.spec.sleep_until ?? "", jobEnvironment(flow, job));
  if ("error" in text) return { error: `sleep_until could not be resolved: ${text.error}` };
  const until = parseTime(text.value);
  if (Number.isNaN(until)) return { error: `sleep_until is not an RFC 3339 time: ${JSON.stringify(text.value)}` };
  const deadline = flowDeadline(flow);
  if (deadline !== undefined && until > deadline)
    return { error: `sleep_until ${text.value} is past the flow's deadline (timeouts.flow: ${flow.timeouts.flow} s)` };
  return { at: Math.max(at, until) };
}

/**
 * The key a wait waits (or waited) for: the one resolved when it started, or, for one read back
 * from storage after it ended (its record keeps the template), the template resolved again from
 * the same environment (its dependencies' results do not change once it started); the template
 * itself for a wait that never started.
 */
export function waitKeyOf(flow: FlowState, job: JobState): string {
  const template = job.spec.wait?.key ?? "";
  if (job.waitKey !== undefined || job.attempt === 0) return job.waitKey ?? template;
  const resolved = resolveTemplate(template, jobEnvironment(flow, job));
  return "value" in resolved ? resolved.value : template;
}

/** What a sleep that came to its end finishes with: until when it slept. */
export function sleptUntil(job: JobState, at: number): { slept_until: string } {
  return { slept_until: new Date(job.deadline?.at ?? at).toISOString() };
}

/**
 * When the flow must have ended (the start of its current run plus `timeouts.flow`: a re-run
 * gets the whole limit again), if it has a deadline and started.
 */
export function flowDeadline(flow: Pick<FlowState, "startedAt" | "runStartedAt" | "timeouts">): number | undefined {
  const start = flow.runStartedAt ?? flow.startedAt;
  return flow.timeouts.flow !== undefined && start !== undefined ? start + flow.timeouts.flow * 1000 : undefined;
}
