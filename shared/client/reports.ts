import type { ProblemDocument } from "./errors.js";

/** The runner webhooks, by the name a batch entry gives as its `event`. */
export type RunnerEventName = "ack" | "started" | "heartbeat" | "result" | "logs";

/** Reports one batch may carry (the coordinator refuses more). */
export const MAX_BATCH_REPORTS = 100;

/**
 * One report of a batch: the job (`flow_id` for a job in a flow, `caller_id` for one outside any
 * flow), the webhook, and the body that webhook takes (always with the attempt).
 */
export interface RunnerReport {
  flow_id?: number;
  caller_id?: number;
  job_id: number;
  event: RunnerEventName;
  body: { attempt: number } & Record<string, unknown>;
}

/** How the coordinator took one report of a batch: as its webhook would answer, or with its problem. */
export type RunnerReportAnswer =
  { outcome: "applied" | "duplicate"; status?: string; reason?: string } | { problem: ProblemDocument };

/** Where a runner POSTs a batch of reports: `{ reports: [...] }`, answered `{ answers: [...] }`. */
export function reportsPath(contextId: number, runnerId: number): string {
  return `/v1/contexts/${contextId}/runners/${runnerId}/reports`;
}
