import type { FlowView, JobView } from "../../shared/model/index.js";
import {
  plainClass,
  plainFlowStatus,
  plainJobStatus,
  type JobStatusFacts,
  type PlainStatus,
  type PlainWords,
} from "../../shared/model/plain-status.js";
import { h } from "./dom.js";

/**
 * The console's words for statuses: what shared/model/plain-status.ts (the one mapping) says of
 * a job or a flow, as a badge, a class and a line of text. The API's names stay in the page's
 * data (`data-status` on the DAG's nodes), never in what a person reads.
 */

export type { PlainStatus, PlainWords };

/** What the words of a job are read from (its kind: a started wait or sleep is waiting, not running). */
export type JobFacts = Pick<JobView, "status" | "attempt" | "error" | "skip_reason"> & Partial<Pick<JobView, "kind">>;

/** A job in plain words. */
export function jobWords(job: JobFacts): PlainWords {
  const facts: JobStatusFacts = { status: job.status, attempt: job.attempt };
  if (job.kind !== undefined) facts.kind = job.kind;
  if (job.error !== undefined) facts.error = job.error;
  if (job.skip_reason !== undefined) facts.skip_reason = job.skip_reason;
  return plainJobStatus(facts);
}

/** A flow in plain words. */
export function flowWords(flow: Pick<FlowView, "status" | "error">): PlainWords {
  return plainFlowStatus(flow.error ? { status: flow.status, error: flow.error } : { status: flow.status });
}

/** The class of a plain status: `plain-not-run`. */
export function plainClassOf(word: PlainStatus): string {
  return `plain-${plainClass(word)}`;
}

/**
 * The words and why in one line, the word said once: `not run: dependency a failed` (its error
 * is `not run: dependency a failed`), `failed: exit code 3`, and a why that starts with the word
 * on its own (`cancelled by an admin`, where the error is `cancelled: cancelled by an admin`).
 */
export function plainText(words: PlainWords): string {
  if (!words.why) return words.word;
  const why = words.why.startsWith(`${words.word}: `) ? words.why.slice(words.word.length + 2) : words.why;
  return why.toLowerCase().startsWith(words.word) ? why : `${words.word}: ${why}`;
}

/** A plain status as a coloured badge (the word is always there too), its why in the tooltip. */
export function plainBadge(words: PlainWords, attrs: Record<string, string> = {}): HTMLElement {
  return h(
    "span",
    { ...attrs, class: `badge ${plainClassOf(words.word)}`, ...(words.why ? { title: plainText(words) } : {}) },
    words.word,
  );
}

/** The order a flow's jobs are counted in: what moves first, then how they ended. */
export const JOB_WORDS: readonly PlainStatus[] = [
  "running",
  "queued",
  "waiting",
  "finished",
  "failed",
  "cancelled",
  "not run",
];

/** How many jobs are in each plain status, in `JOB_WORDS`' order, only those with some. */
export function countWords(jobs: readonly JobFacts[]): [PlainStatus, number][] {
  const counts = new Map<PlainStatus, number>();
  for (const job of jobs) {
    const word = jobWords(job).word;
    counts.set(word, (counts.get(word) ?? 0) + 1);
  }
  return JOB_WORDS.filter((word) => counts.has(word)).map((word) => [word, counts.get(word) ?? 0]);
}
