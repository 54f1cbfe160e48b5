import type { ResultMap } from "../model/index.js";
import { Draft, ENDED } from "./draft.js";
import { unchanged, type FlowEvent, type Transition } from "./events.js";
import { cancelChild, fail, finish } from "./outcomes.js";
import { jobKey, jobKind, type FlowState, type JobState } from "./state.js";
import { childTimedOut, nextLook } from "./work.js";

/*
 * Child flows, the machine's part (docs/flows.md, "Child flows"). A child-flow job starts like a
 * wait (work.ts: started, attempt n, its deadline the next look at its child) and asks the shell
 * to start its child (`superviseChild`); the shell starts it under a key made of the flow, the
 * job and the attempt, so a start repeated (an eviction, an unknown outcome) finds the same
 * child, and tells the child's id (`childStarted`). The child tells its end (`childEnded`); each
 * deadline of the job looks again (`superviseChild`), so an end whose telling was lost is found.
 * Every event names the attempt and the child it is about, and one that does not fit the job as
 * it is now changes nothing: repeated, late and reordered events are harmless.
 */

type ChildEvent = Extract<FlowEvent, { type: "childStarted" | "childEnded" | "childRefused" }>;

/** Applies an event about a child-flow job's child. */
export function onChildEvent(state: FlowState, event: ChildEvent): Transition {
  const job = state.jobs.get(event.job);
  if (!job || jobKind(job.spec) !== "flow")
    return unchanged(state, "not-applicable", `job ${event.job} of this flow is not a child flow`);
  if (event.attempt !== job.attempt)
    return unchanged(
      state,
      "stale",
      `attempt ${event.attempt} is not the current attempt (${job.attempt}) of job ${jobKey(job)}`,
    );
  switch (event.type) {
    case "childStarted":
      return childStarted(state, job, event);
    case "childRefused":
      return running(state, job, undefined) ?? refused(state, job, event);
    case "childEnded":
      return running(state, job, event.child) ?? childEnded(state, job, event);
  }
}

/** The child's id, recorded once: the same again is a duplicate, another one stale. */
function childStarted(
  state: FlowState,
  job: JobState,
  event: Extract<ChildEvent, { type: "childStarted" }>,
): Transition {
  if (job.child !== undefined)
    return unchanged(
      state,
      job.child === event.child ? "duplicate" : "stale",
      `job ${jobKey(job)} already has child flow ${job.child}`,
    );
  if (ENDED.has(job.status) || job.deadline?.kind !== "child")
    return unchanged(state, "stale", `job ${jobKey(job)} is not running a child flow: it is ${job.status}`);
  const d = new Draft(state);
  d.update(job.id, { child: event.child });
  return d.done();
}

/**
 * Why an event about the job's child does not fit: the job ended (a duplicate when it ended as
 * the event says), or the event names another child than the one recorded.
 */
function running(state: FlowState, job: JobState, child: number | undefined): Transition | undefined {
  if (ENDED.has(job.status))
    return unchanged(state, "duplicate", `job ${jobKey(job)} already ended: it is ${job.status}`);
  if (job.deadline?.kind !== "child")
    return unchanged(state, "stale", `job ${jobKey(job)} is not running a child flow`);
  if (child !== undefined && job.child !== undefined && job.child !== child)
    return unchanged(state, "stale", `job ${jobKey(job)} runs child flow ${job.child}, not ${child}`);
  return undefined;
}

function refused(state: FlowState, job: JobState, event: Extract<ChildEvent, { type: "childRefused" }>): Transition {
  if (job.child !== undefined)
    return unchanged(state, "stale", `job ${jobKey(job)} already has child flow ${job.child}`);
  const d = new Draft(state);
  fail(d, job.id, `its child flow could not be started: ${event.error}`, event.at, 0.5);
  return d.done();
}

/**
 * A child-flow job's result: its child's result flattened, as a result maps a name to a text
 * (`<child job>.<key>`: `fetch.rows`, which a dependent reads as `DEP_<JOB>_FETCH_ROWS`), with
 * `child_flow_id`.
 */
export function childResult(child: number, result: Record<string, ResultMap>): ResultMap {
  const flat: ResultMap = { child_flow_id: String(child) };
  for (const [job, values] of Object.entries(result))
    for (const [key, value] of Object.entries(values)) flat[`${job}.${key}`] = value;
  return flat;
}

/** The child ended: the job finishes with the child's result (childResult), or fails saying why. */
function childEnded(state: FlowState, job: JobState, event: Extract<ChildEvent, { type: "childEnded" }>): Transition {
  const d = new Draft(state);
  d.update(job.id, { child: event.child });
  if (event.status === "finished") finish(d, job.id, childResult(event.child, event.result ?? {}), event.at);
  else fail(d, job.id, `child flow ${event.child} failed: ${event.error ?? "it ended in error"}`, event.at, 0.5);
  return d.done();
}

/**
 * A child-flow job's deadline came: past its `flow.timeout`, the child is cancelled and the job
 * fails saying so; else it looks at its child again (and again a minute later, or at the timeout).
 */
export function lookAgain(d: Draft, job: JobState, at: number, random = 0.5): void {
  if (childTimedOut(job, at)) {
    const why = `its child flow${job.child !== undefined ? ` ${job.child}` : ""} did not end within ${job.spec.flow?.timeout} s (flow.timeout)`;
    d.effects.push(cancelChild(job, why));
    fail(d, job.id, why, at, random);
    return;
  }
  d.update(job.id, { deadline: { kind: "child", attempt: job.attempt, at: nextLook(job, job.startedAt ?? at, at) } });
  d.effects.push({
    type: "superviseChild",
    job: job.id,
    attempt: job.attempt,
    ...(job.child !== undefined ? { child: job.child } : {}),
  });
}
