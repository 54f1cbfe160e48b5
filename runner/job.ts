import { mkdir, mkdtemp, rm } from "node:fs/promises";
import path from "node:path";
import {
  formatBytes,
  jsonBytes,
  scriptTypeOf,
  SIZE_LIMITS,
  type DeliveryPayload,
  type Log,
  type RunnerJob,
} from "../shared/model/index.js";
import type { ExecutionOutcome, Executor } from "./executors/index.js";
import { LogBatcher } from "./logs.js";
import { reportTarget, type ReportSink, type ReportTarget } from "./report-sink.js";
import type { PostOutcome } from "./reporter.js";

/** Where the runner writes what it does: one line per job start and end, warnings. */
export interface RunnerLog {
  info(line: string): void;
  warn(line: string): void;
}

/** What running one attempt needs from the runner. */
export interface JobDeps {
  /** Where the attempt's reports go: the coordinator's webhooks, in batches, or a fleet's events stream. */
  sink: ReportSink;
  /** The directory under which each attempt gets its own fresh one. */
  workDir: string;
  heartbeatSeconds: number;
  /** `started` is reported only for a job still running this long after its start (0: at once). */
  startedAfterMs: number;
  log: RunnerLog;
  /** Aborted when the runner stops without waiting: running jobs are killed and report an error. */
  stopSignal: AbortSignal;
  /** The executor for a script type this runner runs; undefined for any other. */
  executorFor(scriptType: string): Executor | undefined;
}

/** How an attempt ended, from the runner's side. */
export interface JobEnd {
  /** `abandoned`: the coordinator took the attempt away (or refused the ack); nothing more was reported. */
  status: "finished" | "error" | "abandoned";
  detail?: string;
}

/** Reports on a result are retried for this long: losing one would leave the job to its timeout. */
const RESULT_RETRY_MS = 10 * 60_000;
/** An acknowledgement is retried this long; past it the coordinator has given the job to another runner anyway. */
export const ACK_RETRY_MS = 30_000;
/**
 * The fast path: a job that ends within this many ms of its start reports only its result. The
 * coordinator takes a result straight after the acknowledgement (`started` is news only while
 * the job runs), and a trivial job then costs the coordinator one request less.
 */
export const DEFAULT_STARTED_AFTER_MS = 50;

/** The coordinator accepts error texts up to this length. */
const MAX_ERROR_CHARS = SIZE_LIMITS.error;

type CallbackName = keyof DeliveryPayload["callbacks"];

/**
 * The reports of one attempt, sent one after another: the coordinator takes a report as a
 * heartbeat only if it is later than the last one, and `started` must come before the result,
 * so reports of one job never overtake each other. A 409 stale-attempt or a 403 means the
 * attempt is not ours any more: `lost` aborts and nothing else is sent.
 */
class AttemptReports {
  private tail: Promise<unknown> = Promise.resolve();
  private pending = 0;
  readonly lost = new AbortController();
  private readonly target: ReportTarget;

  constructor(
    private readonly payload: DeliveryPayload,
    private readonly deps: JobDeps,
    private readonly label: string,
  ) {
    this.target = reportTarget(payload);
  }

  /** Nothing queued or in flight. */
  get idle(): boolean {
    return this.pending === 0;
  }

  send(name: CallbackName, extra: Record<string, unknown> = {}, retryForMs?: number): Promise<PostOutcome | undefined> {
    this.pending++;
    const next = this.tail.then(async (): Promise<PostOutcome | undefined> => {
      try {
        if (this.lost.signal.aborted) return undefined;
        const body = { attempt: this.payload.attempt, ...extra };
        const outcome = await this.deps.sink.send(this.target, name, body, retryForMs);
        if (!outcome.ok) {
          this.deps.log.warn(`${this.label}: ${name} not taken: ${outcome.detail}`);
          if (outcome.stop) this.lost.abort(`the coordinator refused ${name} (${outcome.detail})`);
        }
        return outcome;
      } catch (error) {
        this.deps.log.warn(`${this.label}: ${name} failed: ${(error as Error).message}`);
        return undefined;
      } finally {
        this.pending--;
      }
    });
    this.tail = next;
    return next;
  }
}

/** `job 12 (name, flow 3, attempt 1, sh)`: how log lines name an attempt. */
export function describeAttempt(payload: DeliveryPayload, job: RunnerJob): string {
  const name = job.name ? `${job.name}, ` : "";
  return `job ${job.id} (${name}flow ${payload.flow_id}, attempt ${payload.attempt}, ${job.script_type})`;
}

/**
 * Runs one delivered attempt to its end: acknowledges it first when it was leased (`ack`),
 * runs the script with its executor in a fresh work dir, reports `started` (unless it ended within
 * `startedAfterMs`), heartbeats and batched logs while it runs, then the result with the last
 * logs. Never throws.
 */
export async function runDelivery(
  payload: DeliveryPayload,
  deps: JobDeps,
  options: {
    ack: boolean;
    cancel?: AbortSignal;
    /** Called once the script ended, before its result is sent: the attempt needs no slot any more. */
    ended?: () => void;
  },
): Promise<JobEnd> {
  const job = payload.message.job[0] as RunnerJob;
  const label = describeAttempt(payload, job);
  const reports = new AttemptReports(payload, deps, label);
  if (options.ack) {
    const acked = await reports.send("ack", {}, ACK_RETRY_MS);
    if (!acked?.ok) {
      deps.log.info(`${label} not run: the ack was not taken`);
      return { status: "abandoned", detail: "ack not taken" };
    }
  }

  const began = Date.now();
  deps.log.info(`${label} start`);
  const { outcome, logs } = await execute(payload, job, deps, reports, options.cancel);
  const seconds = ((Date.now() - began) / 1000).toFixed(1);
  if (reports.lost.signal.aborted) {
    deps.log.info(`${label} abandoned after ${seconds} s: ${String(reports.lost.signal.reason)}`);
    return { status: "abandoned", detail: String(reports.lost.signal.reason) };
  }
  options.ended?.();
  const { told, reported } = await reportEnd(reports, withinLimits(outcome), logs);
  const note = reported ? "" : " (the result was not taken)";
  if (told.status === "finished") deps.log.info(`${label} end: finished in ${seconds} s${note}`);
  else deps.log.info(`${label} end: error after ${seconds} s: ${told.error}${note}`);
  return told.status === "finished" ? { status: "finished" } : { status: "error", detail: told.error };
}

/**
 * Runs the script with its executor in a fresh work dir, reporting `started` (unless it ended
 * within `startedAfterMs`), heartbeats and batched logs while it runs; its outcome and the log
 * lines not sent yet.
 */
async function execute(
  payload: DeliveryPayload,
  job: RunnerJob,
  deps: JobDeps,
  reports: AttemptReports,
  cancel: AbortSignal | undefined,
): Promise<{ outcome: ExecutionOutcome; logs: Log[] }> {
  const executor = deps.executorFor(scriptTypeOf(job));
  if (!executor)
    return {
      outcome: { status: "error", error: `this runner has no executor for script type ${job.script_type}` },
      logs: [],
    };
  await mkdir(deps.workDir, { recursive: true });
  const dir = await mkdtemp(path.join(deps.workDir, `job-${job.id}-a${payload.attempt}-`));
  const batcher = new LogBatcher((lines) => void reports.send("logs", { logs: lines }));
  // Skip a beat while a report is pending: any report already tells the coordinator we are alive.
  const heartbeat = setInterval(() => {
    if (reports.idle) void reports.send("heartbeat");
  }, deps.heartbeatSeconds * 1000);
  let startReport: NodeJS.Timeout | undefined;
  const reportStart = () => void reports.send("started");
  try {
    const outcome = await executor.run({
      job,
      workDir: dir,
      env: jobEnv(job, path.join(dir, "result"), path.join(dir, "jobs.json")),
      resultFile: path.join(dir, "result"),
      jobsFile: path.join(dir, "jobs.json"),
      timeoutSeconds: job.timeout,
      onStart: () => {
        if (deps.startedAfterMs === 0) reportStart();
        else startReport = setTimeout(reportStart, deps.startedAfterMs);
      },
      onLine: (stream, line) => batcher.add(stream, line),
      signal: AbortSignal.any([reports.lost.signal, deps.stopSignal, ...(cancel ? [cancel] : [])]),
    });
    return { outcome, logs: batcher.rest() };
  } catch (error) {
    return {
      outcome: { status: "error", error: `the executor failed: ${(error as Error).message}` },
      logs: batcher.rest(),
    };
  } finally {
    clearTimeout(startReport);
    clearInterval(heartbeat);
    await rm(dir, { recursive: true, force: true }).catch((error: Error) =>
      deps.log.warn(`cannot remove ${dir}: ${error.message}`),
    );
  }
}

/**
 * Reports how the attempt ended, with its last log lines; a result the coordinator refuses as
 * too big (413, docs/limits.md) is reported again as an error saying so, rather than leaving its
 * job to time out. What was told, and whether it was taken.
 */
async function reportEnd(
  reports: AttemptReports,
  outcome: ExecutionOutcome,
  logs: Log[],
): Promise<{ told: ExecutionOutcome; reported: boolean }> {
  const body =
    outcome.status === "finished"
      ? { status: "finished", result: outcome.result, logs, ...(outcome.jobs ? { jobs: outcome.jobs } : {}) }
      : { status: "error", error: outcome.error.slice(0, MAX_ERROR_CHARS), result: outcome.result ?? {}, logs };
  const reported = await reports.send("result", body, RESULT_RETRY_MS);
  if (!reported || reported.ok || reported.status !== 413) return { told: outcome, reported: reported?.ok === true };
  const error = `the coordinator refused the result: ${reported.detail}`;
  const again = await reports.send(
    "result",
    { status: "error", error: error.slice(0, MAX_ERROR_CHARS) },
    RESULT_RETRY_MS,
  );
  return { told: { status: "error", error }, reported: again?.ok === true };
}

/**
 * The outcome as the coordinator will take it: a result bigger than `SIZE_LIMITS.result` is an
 * error that says so (the coordinator would end the attempt so anyway, and a big result could
 * make the report larger than a request may be).
 */
function withinLimits(outcome: ExecutionOutcome): ExecutionOutcome {
  if (outcome.status !== "finished") return outcome;
  const size = jsonBytes(outcome.result);
  if (size <= SIZE_LIMITS.result) return outcome;
  return {
    status: "error",
    error: `its result is ${formatBytes(size)}, over the limit of ${formatBytes(SIZE_LIMITS.result)} for a result`,
  };
}

/**
 * A job's environment: the runner's PATH and HOME (so interpreters and tools are found), then
 * the job's env_vars as the coordinator merged them (they win), then RESULT_FILE and JOBS_FILE
 * (executors/process.ts). Nothing else of the runner's own environment leaks into jobs.
 */
function jobEnv(job: RunnerJob, resultFile: string, jobsFile: string): Record<string, string> {
  const env: Record<string, string> = {};
  if (process.env.PATH !== undefined) env.PATH = process.env.PATH;
  if (process.env.HOME !== undefined) env.HOME = process.env.HOME;
  return { ...env, ...job.env_vars, RESULT_FILE: resultFile, JOBS_FILE: jobsFile };
}
