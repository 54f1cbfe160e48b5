import { ApiError, type CoordinatorClient } from "../shared/client/index.js";
import type { FlowStreamEvent, FlowView, JobStatus, JobView, JobWaiting } from "../shared/model/index.js";
import { attemptStderr } from "./api.js";
import { NetworkError } from "./errors.js";
import { plural, timestamp, type Output } from "./output.js";
import {
  addedText,
  flowEnded,
  flowLine,
  jobLabel,
  leftText,
  mapLine,
  resultText,
  endLine,
  tookText,
  unwoundLines,
  whyText,
} from "./flow-text.js";
import { jobWords, PLAIN_MARK, plainText } from "./plain.js";

/** How long loading the final flow rides out an unreachable or failing coordinator (a restart, a deploy). */
const OUTAGE_MS = 30_000;

/** Loads the flow; transient failures are retried for a while, since the flow is there all the same. */
async function loadFlow(client: CoordinatorClient, contextId: number, flowId: number, out: Output): Promise<FlowView> {
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
      await new Promise((resolve) => setTimeout(resolve, 1_000));
    }
  }
}

/** A watched flow's end: its final view, and the last stderr lines of the jobs that failed. */
export interface WatchOutcome {
  view: FlowView;
  stderr: Map<number, string[]>;
}

/** What the watch knows of a job: from the flow as loaded, then from each of its events. */
interface Tracked {
  key: string;
  /** A wait or a sleep takes no runner: it has no stderr, and waits rather than runs. */
  kind: JobView["kind"];
  status: JobStatus;
  attempt: number;
  /** The runner it was last given to. */
  runner: number | undefined;
  /** Why it waited when last told (a runner's refusal, or a view's reason worth a line: see NEWS). */
  waits: string | undefined;
}

/** A job as the watch starts knowing it: not given to a runner, waiting for nothing said. */
function tracked(key: string, kind: Tracked["kind"], status: JobStatus, attempt: number): Tracked {
  return { key, kind, status, attempt, runner: undefined, waits: undefined };
}

/** Reasons to wait worth telling while watching: the ones that do not fix themselves in a moment. */
const NEWS = new Set<JobWaiting["reason"]>([
  "paused",
  "no-runner",
  "runners-busy",
  "context-limit",
  "runner-refusing",
  "pull",
]);

/** A job that ended, however: finished, failed, or skipped by its flow's rules. */
function endedJob(status: JobStatus): boolean {
  return status === "finished" || status === "error" || status === "skipped";
}

/** The progress bar a terminal shows below the lines: ended jobs, time, and what runs now. */
function bar(jobs: Map<number, Tracked>, startedAt: number): string {
  const width = 20;
  const all = [...jobs.values()];
  const done = all.filter((j) => endedJob(j.status)).length;
  const filled = all.length === 0 ? width : Math.round((done / all.length) * width);
  const seconds = Math.floor((Date.now() - startedAt) / 1000);
  const started = all.filter((j) => j.status === "started");
  const running = started.filter((j) => j.kind === "script").map((j) => j.key);
  // A map waits for its instances, which are counted as running themselves.
  const waiting = started.filter((j) => j.kind === "wait" || j.kind === "sleep").map((j) => j.key);
  const text = `[${"█".repeat(filled)}${"░".repeat(width - filled)}] ${done}/${all.length} jobs  ${seconds} s${running.length > 0 ? `  running: ${running.join(", ")}` : ""}${waiting.length > 0 ? `  waiting: ${waiting.join(", ")}` : ""}`;
  // A status line that wraps cannot be erased in place: keep it inside a narrow terminal's width.
  return text.length > 78 ? `${text.slice(0, 77)}…` : text;
}

/** Prints a job's lines behind the count of ended jobs (`  [2/4]`), continuation lines indented below it. */
function printJob(jobs: Map<number, Tracked>, lines: string[], out: Output): void {
  const done = [...jobs.values()].filter((j) => endedJob(j.status)).length;
  const counter = `  [${done}/${jobs.size}]`;
  const [first, ...more] = lines;
  if (first !== undefined) out.line(`${counter} ${first}`);
  for (const line of more) out.line(`${" ".repeat(counter.length)} ${line}`);
}

/**
 * Watches a flow until it ends: loads it once and prints what its jobs did so far, then follows
 * its event stream from there (`since` = the view's `last_seq`), one line per job that starts,
 * finishes, fails or is retried, prefixed by the count of ended jobs (`[2/4]`), with a progress
 * bar below them on a terminal. A dropped stream is reconnected where it left off (said on
 * stderr). Resolves with the final view (and what failed jobs wrote to stderr) once the flow
 * ended; printing the summary is `printOutcome`'s.
 */
export async function watchFlow(
  client: CoordinatorClient,
  contextId: number,
  flowId: number,
  out: Output,
): Promise<WatchOutcome> {
  const began = Date.now();
  const stderr = new Map<number, string[]>();
  const view = await client.loadFlow(contextId, flowId);
  out.line(
    `watching flow ${flowId} in context ${contextId}: ${plural(view.jobs.length, "job")} (${view.jobs.map((j) => j.key).join(", ")})`,
  );
  const jobs = new Map<number, Tracked>();
  const failedLines = async (jobId: number, attempt: number) => {
    const lines = await attemptStderr(client, { contextId, callerId: view.caller_id, jobId, attempt });
    if (lines) stderr.set(jobId, lines);
    return (lines ?? []).map((text) => `  stderr | ${text}`);
  };
  // What happened before the watch, as the view tells it, counted up as it is printed.
  // A compensation is told as `↩ book.compensate`: it undoes a job while the flow unwinds.
  for (const job of view.jobs) jobs.set(job.id, tracked(jobLabel(job), job.kind, "dispatched", 0));
  for (const job of view.jobs) {
    const waits = job.waiting && NEWS.has(job.waiting.reason) ? job.waiting.detail : undefined;
    const key = jobLabel(job);
    const tracked = { key, kind: job.kind, status: job.status, attempt: job.attempt, runner: job.runner_id };
    jobs.set(job.id, { ...tracked, waits });
    const lines = await viewLines({ ...job, key }, failedLines);
    if (lines.length > 0) printJob(jobs, lines, out);
  }
  if (flowEnded(view.status)) return { view, stderr };
  if (view.status === "dispatched" && view.started_at === undefined)
    out.line(`  flow ${flowId} is not started yet: flowc flow start ${contextId} ${flowId} starts it`);

  let shown = "";
  // Redrawn when it changes (most events, heartbeats say, change nothing on it), and each second for its clock.
  const redraw = () => {
    const text = bar(jobs, began);
    if (text !== shown) out.status(text);
    shown = text;
  };
  redraw();
  const ticker = out.tty ? setInterval(redraw, 1_000) : undefined;
  try {
    const events = client.flowEvents(contextId, flowId, {
      ...(view.last_seq !== undefined ? { since: view.last_seq } : {}),
      onDrop: (reason) => out.note(`the event stream dropped (${reason}); reconnecting`),
      onResume: (since) => out.note(`reconnected; resuming after event ${since ?? 0}`),
    });
    for await (const event of events) {
      if (event.type.startsWith("flow.")) {
        if (flowEnded(event.status as FlowView["status"])) {
          out.clearStatus();
          return { view: await loadFlow(client, contextId, flowId, out), stderr };
        }
        const line = flowLine(event, (id) => jobs.get(id)?.key ?? String(id));
        if (line) out.line(line);
      } else if (event.type === "job.added") {
        // A job that joined the flow: tracked from now on, said with how it joined.
        const { job: added, job_id: id, attempt = 0 } = event;
        if (!added || id === undefined || jobs.has(id)) continue;
        jobs.set(id, tracked(added.key, added.kind, event.status as JobStatus, attempt));
        printJob(jobs, [addedText(added, (of) => jobs.get(of)?.key ?? String(of))], out);
      } else {
        const job = jobs.get(event.job_id ?? 0);
        if (!job) continue;
        const lines = await eventLines(event, job, failedLines);
        job.status = event.status as JobStatus;
        job.attempt = event.attempt ?? job.attempt;
        job.runner = event.runner_id ?? job.runner;
        if (lines.length > 0) printJob(jobs, lines, out);
      }
      redraw();
    }
  } finally {
    clearInterval(ticker);
  }
  throw new Error(`the event stream of flow ${flowId} ended before the flow did`);
}

type FailedLines = (jobId: number, attempt: number) => Promise<string[]>;

/** A child-flow job's line: `⇣ sub runs flow 12` (the child once known). */
function childLine(key: string, child: number | undefined): string {
  return child === undefined ? `⇣ ${key} starts its child flow` : `⇣ ${key} runs flow ${child}`;
}

/** The lines for a job as the view shows it at the start of the watch: only what it did already. */
async function viewLines(job: JobView, failedLines: FailedLines): Promise<string[]> {
  const lines: string[] = [];
  if (job.waiting && NEWS.has(job.waiting.reason)) lines.push(`… ${job.key} waits: ${job.waiting.detail}`);
  switch (job.status) {
    case "started":
      if (job.kind === "map") return [mapLine(job.key, job.instances?.length)];
      if (job.kind === "wait")
        return [waitLine(job.key, job.wait?.event, job.wait?.key, secondsToMs(job.waiting?.until))];
      if (job.kind === "sleep") return [sleepLine(job.key, secondsToMs(job.sleep_until ?? job.waiting?.until))];
      if (job.kind === "flow") return [childLine(job.key, job.child_flow_id)];
      return [...lines, startedLine(job.key, job.runner_id, job.attempt)];
    case "finished":
      return [`✓ ${job.key} finished${resultPart(job.result ?? {})}`];
    case "skipped":
      return [skippedLine(job.key, job.skip_reason)];
    case "error":
      return errorLines(job.key, job.id, job.attempt, job.error, job.kind === "script" ? failedLines : noLines);
    default:
      // Waiting with an error: an attempt failed and its retry is due.
      if (job.error !== undefined && job.attempt >= 1)
        return [
          ...lines,
          `↻ ${job.key} attempt ${job.attempt} failed: ${job.error}; it will be retried`,
          ...(await failedLines(job.id, job.attempt)),
        ];
      return lines;
  }
}

/** The lines for a job's event; updates what is known of why it waits. */
async function eventLines(event: FlowStreamEvent, job: Tracked, failedLines: FailedLines): Promise<string[]> {
  const attempt = event.attempt ?? job.attempt;
  const id = event.job_id ?? 0;
  switch (event.type) {
    case "job.started":
      job.waits = undefined;
      if (job.kind === "map") return [mapLine(job.key, undefined)];
      // A wait or a sleep told as started: a subscriber catching up after a gap in the stream.
      if (job.kind === "wait") return [waitLine(job.key, undefined, undefined, undefined)];
      if (job.kind === "sleep") return [sleepLine(job.key, undefined)];
      if (job.kind === "flow") return [childLine(job.key, undefined)];
      return [startedLine(job.key, event.runner_id, attempt)];
    case "job.child_started":
      return [childLine(job.key, event.child_flow_id)];
    case "job.wait_started":
      return [waitLine(job.key, event.event_name, event.event_key, event.until_ms)];
    case "job.sleep_started":
      return [sleepLine(job.key, event.until_ms)];
    case "job.skipped":
      return [skippedLine(job.key, event.reason)];
    case "job.finished":
      return [`✓ ${job.key} finished${resultPart(event.result ?? {})}`];
    case "job.error":
      return errorLines(job.key, id, attempt, event.error, job.kind === "script" ? failedLines : noLines);
    case "job.retry_scheduled": {
      const wait =
        event.retry_at_ms !== undefined ? Math.max(0, Math.round((event.retry_at_ms - event.at_ms) / 1000)) : 0;
      const when = wait > 0 ? ` in ${wait} s` : "";
      // The failure's event no longer names the runner: the attempt's start did.
      const runner = event.runner_id ?? job.runner;
      const on = runner !== undefined ? ` on runner ${runner}` : "";
      return [
        `↻ ${job.key} attempt ${attempt} failed${on}: ${event.error ?? "no reason given"}; it will be retried${when}`,
        ...(await failedLines(id, attempt)),
      ];
    }
    case "job.ready": {
      // A runner refused it: it waits for another (said once per reason).
      if (event.reason === undefined || event.reason === job.waits) return [];
      job.waits = event.reason;
      return [`… ${job.key} waits: ${event.reason}`];
    }
    default:
      return [];
  }
}

function startedLine(key: string, runnerId: number | undefined, attempt: number): string {
  return `→ ${key} started (runner ${runnerId ?? "?"}, attempt ${attempt})`;
}

/** A wait or a sleep wrote nothing to stderr: it ran on no runner. */
const noLines: FailedLines = () => Promise.resolve([]);

const secondsToMs = (seconds: number | undefined) => (seconds === undefined ? undefined : seconds * 1000);

/** `⏸ approval waits for event order.paid with key "42", 60 min left`: what a wait waits for, and its timeout. */
function waitLine(
  key: string,
  event: string | undefined,
  eventKey: string | undefined,
  untilMs: number | undefined,
  now = Date.now(),
): string {
  const what = event === undefined ? "an event" : `event ${event} with key ${JSON.stringify(eventKey ?? "")}`;
  const left = untilMs === undefined ? "" : `, ${leftText(untilMs - now)} left`;
  return `⏸ ${key} waits for ${what}${left}`;
}

/** `☾ cool_down sleeping until 2026-12-01T14:05:00Z, 90 s left`. */
function sleepLine(key: string, untilMs: number | undefined, now = Date.now()): string {
  if (untilMs === undefined) return `☾ ${key} sleeping`;
  return `☾ ${key} sleeping until ${timestamp(Math.floor(untilMs / 1000))}, ${leftText(untilMs - now)} left`;
}

/** `⤼ ship not run: when is false: …`: a job its flow's rules skipped, and why. */
function skippedLine(key: string, reason: string | undefined): string {
  return `⤼ ${key} not run${reason ? `: ${reason}` : ""}`;
}

function resultPart(result: Record<string, string>): string {
  const text = resultText(result);
  return text ? `  ${text}` : "";
}

async function errorLines(
  key: string,
  jobId: number,
  attempt: number,
  error: string | undefined,
  failedLines: FailedLines,
): Promise<string[]> {
  // Not run (attempt 0: a dependency failed, the error says which) or cancelled: no stderr to show.
  const words = jobWords({ status: "error", attempt, error });
  if (words.word !== "failed") return [`${PLAIN_MARK[words.word]} ${key} ${plainText(words)}`];
  const which = attempt > 1 ? ` (attempt ${attempt})` : "";
  return [`✗ ${key} failed${which}: ${error ?? "no reason given"}`, ...(await failedLines(jobId, attempt))];
}

/**
 * The end of a watched flow: its status and time, the result of every job by key, and on error
 * which job failed, why, and which jobs never ran. Returns the exit code: 0 finished, 1 error.
 */
export function printOutcome({ view, stderr }: WatchOutcome, out: Output): number {
  const seconds = tookText(view);
  // Not run: skipped by the flow's rules, never started because a dependency failed, or left
  // waiting when the flow ended.
  const notRun = view.jobs.filter((j) => jobWords(j).word === "not run" || !endedJob(j.status));
  const lines: string[] = [];
  if (view.status === "finished") {
    lines.push(`flow ${view.id} finished${seconds}${notRun.length > 0 ? ` (${notRun.length} not run)` : ""}`);
  } else if (view.status === "compensated" || view.status === "compensation_failed") {
    lines.push(...unwoundLines(view, seconds));
  } else {
    lines.push(endLine(view, seconds));
    for (const text of stderr.get(view.error?.job ?? 0) ?? []) lines.push(`  stderr | ${text}`);
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
  if (notRun.length > 0) {
    // Each with why: a `when` or `needs` that was not met, a wait's timeout, a dependency that failed.
    const width = Math.max(...notRun.map((j) => j.key.length));
    lines.push("not run:");
    for (const job of notRun)
      lines.push(`  ${job.key.padEnd(width)}  ${view.skipped?.[job.key] ?? whyText(job) ?? "-"}`.trimEnd());
  }
  out.result(view, lines);
  return view.status === "finished" ? 0 : 1;
}

/**
 * Watches a flow to its end and prints the outcome; resolves with the exit code (0 finished,
 * 1 error). Ctrl-C stops watching, not the flow, and says how to pick it up again.
 */
export async function watchToEnd(
  client: CoordinatorClient,
  contextId: number,
  flowId: number,
  out: Output,
): Promise<number> {
  const onInterrupt = () => {
    out.note(`stopped watching; flow ${flowId} goes on (flowc flow watch ${contextId} ${flowId})`);
    process.exit(130);
  };
  process.once("SIGINT", onInterrupt);
  try {
    return printOutcome(await watchFlow(client, contextId, flowId, out), out);
  } finally {
    process.off("SIGINT", onInterrupt);
  }
}
