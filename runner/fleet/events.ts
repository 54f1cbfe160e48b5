import { headers as natsHeaders } from "@nats-io/nats-core";
import type { JetStreamClient } from "@nats-io/jetstream";
import { z } from "zod";
import type { RunnerEventName } from "../../shared/client/index.js";
import type { PostOutcome } from "../reporter.js";
import type { ReportBody, ReportSink, ReportTarget } from "../report-sink.js";
import { attemptId, type AttemptRef, type FleetNames } from "./names.js";
import { retryFor } from "./retry.js";

/**
 * What a worker publishes to the events stream for the gateway to relay: the report as its
 * webhook takes it, where it goes, and the attempt it is about. Read with this schema: anything
 * else on the subject is not ours and is dropped.
 */
export const FleetEvent = z.object({
  attempt: z.object({
    context_id: z.int().positive(),
    caller_id: z.int().positive(),
    message_id: z.int().positive(),
    attempt: z.int().positive(),
  }),
  target: z.object({
    flow_id: z.int().min(0),
    caller_id: z.int().positive(),
    job_id: z.int().positive(),
    callbacks: z.object({
      ack: z.string(),
      started: z.string(),
      heartbeat: z.string(),
      result: z.string(),
      logs: z.string(),
    }),
  }),
  event: z.enum(["ack", "started", "heartbeat", "result", "logs"]),
  body: z.looseObject({ attempt: z.int().positive() }),
  /** The worker that ran it, for logs and metrics. */
  worker: z.string(),
});
export type FleetEvent = z.infer<typeof FleetEvent>;

const DEFAULT_RETRY_FOR_MS = 60_000;

/**
 * A worker's sink for one delivery of an attempt: each report becomes an event in the events
 * stream, and counts as taken once JetStream stored it (the gateway relays it from there, and
 * keeps it until the coordinator answered). A publish that fails (NATS away) is tried again with
 * backoff (retryFor), under the same dedupe id, so a retry whose first try was stored is stored once.
 */
export class EventSink implements ReportSink {
  private seq = 0;
  /** Whether the attempt's result is in the stream: only then may the job message be acknowledged. */
  resultStored = false;

  constructor(
    private readonly js: JetStreamClient,
    private readonly names: FleetNames,
    private readonly attempt: AttemptRef,
    /** The worker and which delivery of the job message this is: dedupe ids of one run never meet another's. */
    private readonly run: { worker: string; delivery: number },
  ) {}

  async send(
    target: ReportTarget,
    event: RunnerEventName,
    body: ReportBody,
    retryForMs?: number,
  ): Promise<PostOutcome> {
    const payload: FleetEvent = { attempt: this.attempt, target, event, body, worker: this.run.worker };
    const msgID = `${attemptId(this.attempt)}.${this.run.worker}.${this.run.delivery}.${++this.seq}`;
    const headers = natsHeaders();
    headers.set("Fleet-Event", event);
    try {
      await retryFor(
        () => this.js.publish(this.names.event(event, this.attempt), JSON.stringify(payload), { msgID, headers }),
        retryForMs ?? DEFAULT_RETRY_FOR_MS,
      );
    } catch (error) {
      return { ok: false, stop: false, status: 0, detail: `not stored in NATS: ${(error as Error).message}` };
    }
    if (event === "result") this.resultStored = true;
    return { ok: true, status: 202, body: { stored: event } };
  }
}
