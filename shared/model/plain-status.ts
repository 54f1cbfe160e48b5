/**
 * The one mapping from the API's status names (the seeds' model: `dispatched`,
 * `waiting_for_prerequisites`, `started`, `error`, …) to the words people read in views:
 * `flowc`'s tables and watches and the console's lists, nodes and panels. The API and the
 * streams keep the model's names; only what a person reads goes through here
 * (docs/flows.md, "Statuses in plain words").
 *
 * Zod-free on purpose: the console's bundle imports it.
 */

/** A job's or a flow's status as a person reads it. */
export type PlainStatus =
  | "created"
  | "queued"
  | "waiting"
  | "running"
  | "finished"
  | "failed"
  | "cancelled"
  | "not run"
  | "compensating"
  | "compensated"
  | "compensation failed";

/** A plain status, and why when the word alone does not say it (a job not run, a cancel's reason). */
export interface PlainWords {
  word: PlainStatus;
  why?: string;
}

/** What the mapping reads of a job: its API status, its kind, its attempt and its error or skip reason. */
export interface JobStatusFacts {
  status: "dispatched" | "waiting_for_prerequisites" | "started" | "error" | "finished" | "skipped";
  /** A started wait or sleep is waiting (for its event, for its time), not running. */
  kind?: string;
  attempt: number;
  error?: string;
  skip_reason?: string;
}

/** What the mapping reads of a flow: its API status and its error. */
export interface FlowStatusFacts {
  status: "dispatched" | "started" | "error" | "finished" | "compensating" | "compensated" | "compensation_failed";
  error?: { job: number; reason: string };
}

/** An error text that a cancel wrote: the flow's (`cancelled: <reason>`) or its jobs'. */
function isCancel(text: string | undefined): boolean {
  return text !== undefined && text.startsWith("cancelled");
}

/**
 * A job in plain words:
 * - `dispatched` → queued (ready, waiting for a runner); `waiting_for_prerequisites` → waiting
 *   (for its dependencies); `started` → running, but waiting for a wait or a sleep (for its
 *   event, its time: it holds no runner); `finished` → finished;
 * - `skipped` → not run, with its skip reason;
 * - `error` → cancelled when a cancel ended it, not run when it never had an attempt (its
 *   dependency failed, the flow failed first), otherwise failed; each with the error as why.
 */
export function plainJobStatus(job: JobStatusFacts): PlainWords {
  switch (job.status) {
    case "dispatched":
      return { word: "queued" };
    case "waiting_for_prerequisites":
      return { word: "waiting" };
    case "started":
      return { word: job.kind === "wait" || job.kind === "sleep" ? "waiting" : "running" };
    case "finished":
      return { word: "finished" };
    case "skipped":
      return withWhy("not run", job.skip_reason);
    case "error":
      if (isCancel(job.error)) return withWhy("cancelled", job.error);
      return withWhy(job.attempt === 0 ? "not run" : "failed", job.error);
  }
}

/**
 * A flow in plain words: `dispatched` → created (submitted, not started); `started` → running;
 * `error` → cancelled when its own error is a cancel (job 0, `cancelled: …`), otherwise failed;
 * the unwinding's statuses keep their words (`compensation_failed` → compensation failed).
 */
export function plainFlowStatus(flow: FlowStatusFacts): PlainWords {
  switch (flow.status) {
    case "dispatched":
      return { word: "created" };
    case "started":
      return { word: "running" };
    case "finished":
      return { word: "finished" };
    case "compensating":
      return { word: "compensating" };
    case "compensated":
      return { word: "compensated" };
    case "compensation_failed":
      return { word: "compensation failed" };
    case "error":
      if (flow.error?.job === 0 && isCancel(flow.error.reason)) return withWhy("cancelled", flow.error.reason);
      return withWhy("failed", flow.error?.reason);
  }
}

/**
 * Plain words as one text: the word, and why after a colon (`failed: exit code 3`). A why that
 * opens with its word already (`not run: dependency a failed`, a cancel's `cancelled: …`) is
 * not said twice.
 */
export function plainText({ word, why }: PlainWords): string {
  if (!why) return word;
  return why === word || why.startsWith(`${word}:`) ? why : `${word}: ${why}`;
}

/** The CSS-safe name of a plain status (`not run` → `not-run`), for classes such as `plain-not-run`. */
export function plainClass(word: PlainStatus): string {
  return word.replace(/ /g, "-");
}

function withWhy(word: PlainStatus, why: string | undefined): PlainWords {
  return why ? { word, why } : { word };
}
