import { reportsPath, type RunnerEventName, type RunnerReport } from "../shared/client/index.js";
import type { ReportBody, ReportSink, ReportTarget } from "./report-sink.js";
import { refusal, type PostOutcome, type Reporter } from "./reporter.js";

/** Where and how the batcher sends. */
export interface BatcherOptions {
  reporter: Reporter;
  contextId: number;
  runnerId: number;
  /** Most reports in one request (at most 100, what the coordinator takes). */
  max: number;
  warn(line: string): void;
}

/** Jobs per lease (pulling) and reports per request unless told otherwise. */
export const DEFAULT_BATCH = 32;
/** Batches on the way at once; more reports wait meanwhile, so batches grow with the load. */
const IN_FLIGHT = 2;
/** A batch stays below this many bytes of JSON (a result may carry up to 1,000 log lines). */
const MAX_BYTES = 1 << 20;
const INITIAL_DELAY_MS = 250;
const MAX_DELAY_MS = 8_000;
const DEFAULT_RETRY_FOR_MS = 60_000;

interface Waiting {
  report: RunnerReport;
  /** The report's own webhook, for when the batch route cannot take it. */
  callback: string;
  bytes: number;
  /** Given up on (and answered as failed) after this. */
  deadline: number;
  resolve(outcome: PostOutcome): void;
}

/**
 * Sends the runner's reports in batches: one signed request to the batched webhook
 * (`POST /v1/contexts/<c>/runners/<r>/reports`) carries up to `max` of them, sent when that many
 * wait, or on the event loop's next turn with those made meanwhile; while IN_FLIGHT batches are
 * on the way, reports wait for one to come back, so batches grow with the load and a lone report
 * goes at once. Each report is answered on its own, as its webhook would
 * have answered: a report answered with a 5xx problem, and every report of a batch that failed on
 * the way (network, 5xx, 429), is sent again in a later batch with backoff, until its own retry
 * window closes. The coordinator applies each report once however often it comes (a repeat is a
 * `duplicate`), so sending one again whose answer was lost is harmless. A batch refused whole (a
 * 4xx: one report it cannot read) goes out again as single webhooks, so the others are not held
 * back by it; a coordinator without the batch route (404 no-route) gets single webhooks from then on.
 *
 * The caller sends one report of an attempt at a time (AttemptReports waits for each answer), so
 * batches never reorder the reports of one job.
 */
export class ReportBatcher implements ReportSink {
  private readonly queue: Waiting[] = [];
  private inFlight = 0;
  /** Cancels the flush that is due (on the event loop's next turn, or after a backoff). */
  private cancelFlush: (() => void) | undefined;
  /** The coordinator has no batch route: every report goes to its own webhook. */
  private single = false;
  private delay = INITIAL_DELAY_MS;
  /** No batch before this (epoch ms): backing off after a failed one. */
  private notBefore = 0;
  private readonly path: string;
  /** Signed requests sent for batches so far, and reports they carried (figures and tests). */
  requests = 0;
  reports = 0;

  constructor(private readonly options: BatcherOptions) {
    this.path = reportsPath(options.contextId, options.runnerId);
  }

  /** Reports `event` of an attempt; resolves with how the coordinator took it. */
  send(
    target: ReportTarget,
    event: RunnerEventName,
    body: ReportBody,
    retryForMs = DEFAULT_RETRY_FOR_MS,
  ): Promise<PostOutcome> {
    const callback = target.callbacks[event];
    if (this.single) return this.options.reporter.post(callback, body, { retryForMs });
    const job = target.flow_id > 0 ? { flow_id: target.flow_id } : { caller_id: target.caller_id };
    const report: RunnerReport = { ...job, job_id: target.job_id, event, body };
    return new Promise((resolve) => {
      const bytes = JSON.stringify(report).length;
      this.queue.push({ report, callback, bytes, deadline: Date.now() + retryForMs, resolve });
      this.schedule();
    });
  }

  private schedule(): void {
    if (this.queue.length === 0 || this.inFlight >= IN_FLIGHT) return;
    const wait = this.notBefore - Date.now();
    if (this.queue.length >= this.options.max && wait <= 0) {
      this.cancelFlush?.();
      this.cancelFlush = undefined;
      this.flush();
      return;
    }
    if (this.cancelFlush) return;
    const fire = () => {
      this.cancelFlush = undefined;
      this.flush();
    };
    // Reports made in this turn of the event loop go together; a backoff waits its time out.
    if (wait > 0) {
      const timer = setTimeout(fire, wait);
      this.cancelFlush = () => clearTimeout(timer);
    } else {
      const immediate = setImmediate(fire);
      this.cancelFlush = () => clearImmediate(immediate);
    }
  }

  private flush(): void {
    if (this.queue.length === 0 || this.inFlight >= IN_FLIGHT) return;
    if (Date.now() < this.notBefore) return this.schedule();
    let bytes = 0;
    let n = 0;
    while (n < this.queue.length && n < this.options.max) {
      bytes += (this.queue[n] as Waiting).bytes;
      if (n > 0 && bytes > MAX_BYTES) break;
      n++;
    }
    const batch = this.queue.splice(0, n);
    this.inFlight++;
    void this.post(batch).finally(() => {
      this.inFlight--;
      this.schedule();
    });
    this.schedule();
  }

  private async post(batch: Waiting[]): Promise<void> {
    if (this.single) return this.oneByOne(batch);
    this.requests++;
    this.reports += batch.length;
    const outcome = await this.options.reporter.post(
      this.path,
      { reports: batch.map((w) => w.report) },
      { retryForMs: 0 }, // retried here, report by report, each within its own window
    );
    const answers = outcome.ok ? (outcome.body as { answers?: unknown } | undefined)?.answers : undefined;
    if (outcome.ok && Array.isArray(answers) && answers.length === batch.length) {
      this.delay = INITIAL_DELAY_MS;
      const again = batch.filter((w, i) => !this.settle(w, answers[i]));
      if (again.length > 0) this.retry(again, "a 5xx problem");
      return;
    }
    if (outcome.ok || outcome.status === 0) return this.retry(batch, outcome.ok ? "no answers" : outcome.detail);
    if (outcome.status === 404 && outcome.detail.includes("no-route")) {
      this.options.warn("the coordinator has no batched report route; sending each report to its own webhook");
      this.single = true;
    } else {
      this.options.warn(`a batch of ${batch.length} reports was refused (${outcome.detail}); sending them one by one`);
    }
    return this.oneByOne(batch);
  }

  /** Resolves a report with its answer; false when it is to be sent again (a 5xx problem). */
  private settle(w: Waiting, answer: unknown): boolean {
    const problem = (answer as { problem?: { status?: unknown } } | null)?.problem;
    if (!problem) {
      w.resolve({ ok: true, status: 200, body: answer });
      return true;
    }
    const status = typeof problem.status === "number" ? problem.status : 500;
    if (status >= 500 || status === 429) return false;
    w.resolve(refusal(status, problem));
    return true;
  }

  /** Puts reports back at the front, to go after a backoff; those out of time are answered as failed. */
  private retry(batch: Waiting[], why: string): void {
    const now = Date.now();
    const keep = batch.filter((w) => {
      if (now + this.delay <= w.deadline) return true;
      w.resolve({ ok: false, stop: false, status: 0, detail: `gave up: ${why}` });
      return false;
    });
    if (keep.length === 0) return;
    this.options.warn(`${keep.length} report(s) not taken (${why}); sending again in ${this.delay} ms`);
    this.notBefore = now + this.delay;
    this.delay = Math.min(this.delay * 2, MAX_DELAY_MS);
    this.queue.unshift(...keep);
  }

  private async oneByOne(batch: Waiting[]): Promise<void> {
    await Promise.all(
      batch.map(async (w) => {
        const retryForMs = Math.max(0, w.deadline - Date.now());
        w.resolve(await this.options.reporter.post(w.callback, w.report.body, { retryForMs }));
      }),
    );
  }
}
