import { ApiError, type CoordinatorClient } from "../shared/client/index.js";
import type { FlowView, JobView, JobWaiting } from "../shared/model/index.js";
import { attemptStderr } from "./api.js";
import { NetworkError } from "./errors.js";
import { plural, type Output } from "./output.js";
import { resultText } from "./flow-text.js";

/** How often a flow is polled: quickly while it changes, backing off while nothing does. */
export const WATCH_INTERVALS = { fastMs: 500, slowMs: 2_000 } as const;

/** How long a watch rides out an unreachable or failing coordinator (a restart, a deploy). */
const OUTAGE_MS = 30_000;

/** Loads the flow again; transient failures are retried for a while, since the flow goes on meanwhile. */
async function poll(client: CoordinatorClient, contextId: number, flowId: number, out: Output): Promise<FlowView> {
  const since = Date.now();
  let told = false;
  for (;;) {
    try {
      return await client.loadFlow(contextId, flowId);
    } catch (error) {
      const transient = error instanceof NetworkError || (error instanceof ApiError && error.status >= 500);
      if (!transient || Date.now() - since > OUTAGE_MS) throw error;
      if (!told) out.note(`${(error as Error).message}; trying again for ${OUTAGE_MS / 1000} s`);
      told = true;
      await new Promise((resolve) => setTimeout(resolve, WATCH_INTERVALS.slowMs));
    }
  }
}

/** A watched flow's end: its final view, and the last stderr lines of the jobs that failed. */
export interface WatchOutcome {
  view: FlowView;
  stderr: Map<number, string[]>;
}

/** What was last seen of a job, to print only what changed. */
interface Seen {
  status: JobView["status"];
  attempt: number;
  error: string | undefined;
  /** The last attempt whose failure was printed (a retried job fails without ending). */
  failed: number;
  /** Why it waited when last seen (only the reasons worth a line: see NEWS). */
  waits: string | undefined;
}

/** Reasons to wait worth telling while watching: the ones that do not fix themselves in a moment. */
const NEWS = new Set<JobWaiting["reason"]>(["paused", "no-runner", "runners-busy", "runner-refusing", "pull"]);

function ended(view: FlowView): boolean {
  return view.status === "finished" || view.status === "error";
}

function doneCount(view: FlowView): number {
  return view.jobs.filter((j) => j.status === "finished" || j.status === "error").length;
}

function bar(view: FlowView, startedAt: number): string {
  const width = 20;
  const done = doneCount(view);
  const filled = view.jobs.length === 0 ? width : Math.round((done / view.jobs.length) * width);
  const seconds = Math.floor((Date.now() - startedAt) / 1000);
  const running = view.jobs.filter((j) => j.status === "started").map((j) => j.key);
  const text = `[${"█".repeat(filled)}${"░".repeat(width - filled)}] ${done}/${view.jobs.length} jobs  ${seconds} s${running.length > 0 ? `  running: ${running.join(", ")}` : ""}`;
  // A status line that wraps cannot be erased in place: keep it inside a narrow terminal's width.
  return text.length > 78 ? `${text.slice(0, 77)}…` : text;
}

/**
 * Watches a flow until it ends: one line per job whose status changed since the last poll,
 * prefixed by the count of ended jobs (`[2/4]`), with a redrawn progress bar below them on a
 * terminal. Polls every 500 ms, doubling up to 2 s while nothing changes. Resolves with the
 * final view (and what failed jobs wrote to stderr); printing the summary is `printOutcome`'s.
 */
export async function watchFlow(
  client: CoordinatorClient,
  contextId: number,
  flowId: number,
  out: Output,
): Promise<WatchOutcome> {
  const began = Date.now();
  const seen = new Map<number, Seen>();
  const stderr = new Map<number, string[]>();
  let interval: number = WATCH_INTERVALS.fastMs;
  let hinted = false;
  let view = await client.loadFlow(contextId, flowId);
  out.line(
    `watching flow ${flowId} in context ${contextId}: ${plural(view.jobs.length, "job")} (${view.jobs.map((j) => j.key).join(", ")})`,
  );
  for (;;) {
    const changed = await printChanges(client, view, seen, stderr, out);
    if (ended(view)) {
      out.clearStatus();
      return { view, stderr };
    }
    if (view.status === "dispatched" && view.started_at === undefined && !hinted) {
      out.line(`  flow ${flowId} is not started yet: flowc flow start ${contextId} ${flowId} starts it`);
      hinted = true;
    }
    out.status(bar(view, began));
    interval = changed ? WATCH_INTERVALS.fastMs : Math.min(interval * 2, WATCH_INTERVALS.slowMs);
    await new Promise((resolve) => setTimeout(resolve, interval));
    view = await poll(client, contextId, flowId, out);
  }
}

/** Prints a line per job that changed; true when any did. */
async function printChanges(
  client: CoordinatorClient,
  view: FlowView,
  seen: Map<number, Seen>,
  stderr: Map<number, string[]>,
  out: Output,
): Promise<boolean> {
  let changed = false;
  const total = view.jobs.length;
  for (const job of view.jobs) {
    const before = seen.get(job.id);
    const waits = job.waiting && NEWS.has(job.waiting.reason) ? job.waiting.reason : undefined;
    if (
      before &&
      before.status === job.status &&
      before.attempt === job.attempt &&
      before.error === job.error &&
      before.waits === waits
    )
      continue;
    const now: Seen = {
      status: job.status,
      attempt: job.attempt,
      error: job.error,
      failed: before?.failed ?? 0,
      waits,
    };
    seen.set(job.id, now);
    changed = true;
    if (waits && waits !== before?.waits && job.waiting) {
      out.line(`  … ${job.key} waits: ${job.waiting.detail}`);
      if (before && before.status === job.status && before.attempt === job.attempt && before.error === job.error)
        continue;
    }
    // The first look at a job that has not done anything yet is not news.
    if (!before && (job.status === "dispatched" || job.status === "waiting_for_prerequisites") && job.attempt <= 1)
      continue;
    // Counted over what has been printed so far, so two jobs ending in one poll count up 3, 4.
    const done = [...seen.values()].filter((s) => s.status === "finished" || s.status === "error").length;
    const counter = `  [${done}/${total}]`;
    const [first, ...more] = await jobLines(client, view, job, before, now, stderr);
    if (first !== undefined) out.line(`${counter} ${first}`);
    for (const line of more) out.line(`${" ".repeat(counter.length)} ${line}`);
  }
  return changed;
}

/** The line(s) for a job's new state. */
async function jobLines(
  client: CoordinatorClient,
  view: FlowView,
  job: JobView,
  before: Seen | undefined,
  now: Seen,
  stderr: Map<number, string[]>,
): Promise<string[]> {
  const said = async () => {
    const lines = await attemptStderr(client, {
      contextId: view.context_id,
      callerId: view.caller_id,
      jobId: job.id,
      attempt: job.attempt,
    });
    if (lines) stderr.set(job.id, lines);
    return (lines ?? []).map((text) => `  stderr | ${text}`);
  };
  const attempt = job.attempt > 1 ? `, attempt ${job.attempt}` : "";
  switch (job.status) {
    case "started":
      return [
        `→ ${job.key} started (${job.runner_id !== undefined ? `runner ${job.runner_id}` : "runner ?"}${attempt})`,
      ];
    case "finished": {
      const result = resultText(job.result ?? {});
      return [`✓ ${job.key} finished${result ? `  ${result}` : ""}`];
    }
    case "error": {
      // attempt 0: it never ran, because a dependency failed (the error says which).
      if (job.attempt === 0) return [`– ${job.key} ${job.error ?? "not run"}`];
      const which = job.attempt > 1 ? ` (attempt ${job.attempt})` : "";
      return [`✗ ${job.key} error${which}: ${job.error ?? "no reason given"}`, ...(await said())];
    }
    default: {
      if (!before || job.attempt < 1) return [];
      // Waiting again with an error, same attempt: it failed and waits out its retry's backoff.
      // (The error stays on the job when the retry is dispatched, hence "same attempt".)
      if (job.error !== undefined && job.attempt === before.attempt && job.attempt > now.failed) {
        now.failed = job.attempt;
        return [`↻ ${job.key} attempt ${job.attempt} failed: ${job.error}; it will be retried`, ...(await said())];
      }
      // A higher attempt whose predecessor's failure went by between two polls.
      // (Attempt 0 → 1 is the first dispatch, once its dependencies are done.)
      if (before.attempt >= 1 && job.attempt > before.attempt && now.failed < before.attempt) {
        now.failed = before.attempt;
        return [
          `↻ ${job.key} retrying (attempt ${job.attempt})${job.error !== undefined ? ` after: ${job.error}` : ""}`,
        ];
      }
      return [];
    }
  }
}

/**
 * The end of a watched flow: its status and time, the result of every job by key, and on error
 * which job failed, why, and which jobs never ran. Returns the exit code: 0 finished, 1 error.
 */
export function printOutcome({ view, stderr }: WatchOutcome, out: Output): number {
  // The coordinator keeps whole seconds: a flow inside one second took "under a second".
  const took =
    view.started_at !== undefined && view.ended_at !== undefined ? view.ended_at - view.started_at : undefined;
  const seconds = took === undefined ? "" : took === 0 ? " in under a second" : ` in ${took} s`;
  const lines: string[] = [];
  if (view.status === "finished") {
    lines.push(`flow ${view.id} finished${seconds}`);
  } else {
    const failed = view.error ? view.jobs.find((j) => j.id === view.error?.job) : undefined;
    const who = view.error
      ? view.error.job === 0
        ? "the flow was cancelled"
        : `job ${failed?.key ?? view.error.name ?? view.error.job} failed`
      : "";
    lines.push(`flow ${view.id} error${seconds}${who ? `: ${who}` : ""}${view.error ? `: ${view.error.reason}` : ""}`);
    for (const text of (failed && stderr.get(failed.id)) || []) lines.push(`  stderr | ${text}`);
  }
  // In the flow's job order, not the order the jobs happened to end in.
  const keys = [
    ...view.jobs.map((j) => j.key).filter((k) => k in view.result),
    ...Object.keys(view.result).filter((k) => !view.jobs.some((j) => j.key === k)),
  ];
  if (keys.length > 0) {
    const width = Math.max(...keys.map((k) => k.length));
    lines.push("result:");
    for (const key of keys) lines.push(`  ${key.padEnd(width)}  ${resultText(view.result[key] ?? {}) || "-"}`);
  }
  const notRun = view.jobs.filter((j) => j.status !== "finished" && (j.attempt === 0 || j.status !== "error"));
  if (view.status === "error" && notRun.length > 0) lines.push(`not run: ${notRun.map((j) => j.key).join(", ")}`);
  out.result(view, lines);
  return view.status === "finished" ? 0 : 1;
}
