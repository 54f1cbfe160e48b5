import type { FlowStatus, JobStatus } from "../shared/model/index.js";
import {
  plainFlowStatus,
  plainJobStatus,
  plainText,
  type PlainStatus,
  type PlainWords,
} from "../shared/model/plain-status.js";

/*
 * What flowc prints of statuses: the plain words of shared/model/plain-status.ts (docs/flows.md,
 * "Statuses in plain words"), with a mark each. `--json` keeps the API's names.
 */

/** One character per plain status, so a table, a DAG or a watch reads at a glance. */
export const PLAIN_MARK: Record<PlainStatus, string> = {
  created: "·",
  queued: "·",
  waiting: "…",
  running: "→",
  finished: "✓",
  failed: "✗",
  cancelled: "⊘",
  "not run": "–",
  compensating: "↩",
  compensated: "↩",
  "compensation failed": "✗",
};

/** What flowc reads of a job to word it (a view's job, a DAG's node). */
export interface JobFacts {
  status: JobStatus;
  attempt: number;
  error?: string | undefined;
  skip_reason?: string | undefined;
  kind?: "script" | "wait" | "sleep" | "flow" | "map" | undefined;
}

/** A job in plain words. */
export function jobWords(job: JobFacts): PlainWords {
  return plainJobStatus({
    status: job.status,
    attempt: job.attempt,
    ...(job.error !== undefined ? { error: job.error } : {}),
    ...(job.skip_reason !== undefined ? { skip_reason: job.skip_reason } : {}),
    ...(job.kind !== undefined ? { kind: job.kind } : {}),
  });
}

/** A job's mark: its word's, except a job its flow's rules skipped (⤼), told apart from one that could not run. */
export function jobMark(job: JobFacts): string {
  return job.status === "skipped" ? "⤼" : PLAIN_MARK[jobWords(job).word];
}

/** A flow in plain words, from its status and its error. */
export function flowWords(flow: {
  status: FlowStatus;
  error?: { job: number; reason: string } | undefined;
}): PlainWords {
  return plainFlowStatus({ status: flow.status, ...(flow.error ? { error: flow.error } : {}) });
}

/** A flow's word alone: `running`, `cancelled`, `compensation failed`. */
export function flowWord(flow: Parameters<typeof flowWords>[0]): string {
  return flowWords(flow).word;
}

/** Plain words as one text (`failed: exit code 3`, `not run: dependency a failed`). */
export { plainText };
