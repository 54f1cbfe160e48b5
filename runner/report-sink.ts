import type { RunnerEventName } from "../shared/client/index.js";
import type { DeliveryPayload } from "../shared/model/index.js";
import type { PostOutcome, Reporter } from "./reporter.js";

/**
 * Where an attempt's reports go: enough of its delivery to address its webhooks (`callbacks`)
 * or a batched report (the flow, or the caller of a job outside any flow, and the job).
 */
export interface ReportTarget {
  /** 0 for a job outside any flow. */
  flow_id: number;
  caller_id: number;
  job_id: number;
  callbacks: DeliveryPayload["callbacks"];
}

/** A report's body: the attempt it is about, and what its webhook takes. */
export type ReportBody = { attempt: number } & Record<string, unknown>;

/**
 * Takes an attempt's reports and resolves with how they were taken: straight to the coordinator
 * (DirectSink), in batches (ReportBatcher), or into a fleet's events stream (runner/fleet).
 */
export interface ReportSink {
  send(target: ReportTarget, event: RunnerEventName, body: ReportBody, retryForMs?: number): Promise<PostOutcome>;
}

/** The target of a delivery's reports. */
export function reportTarget(payload: DeliveryPayload): ReportTarget {
  return {
    flow_id: payload.flow_id,
    caller_id: payload.message.caller_id,
    job_id: payload.job_id,
    callbacks: payload.callbacks,
  };
}

/** One signed webhook request per report. */
export class DirectSink implements ReportSink {
  constructor(private readonly reporter: Reporter) {}

  send(target: ReportTarget, event: RunnerEventName, body: ReportBody, retryForMs?: number): Promise<PostOutcome> {
    return this.reporter.post(target.callbacks[event], body, retryForMs === undefined ? {} : { retryForMs });
  }
}
