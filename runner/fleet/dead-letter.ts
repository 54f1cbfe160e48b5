import { headers as natsHeaders } from "@nats-io/nats-core";
import type { JetStreamClient, JsMsg } from "@nats-io/jetstream";
import type { DeliveryPayload, RunnerJob } from "../../shared/model/index.js";
import type { RunnerLog } from "../job.js";
import { reportTarget } from "../report-sink.js";
import { EventSink } from "./events.js";
import type { FleetMetrics } from "./metrics.js";
import { attemptId, attemptOf, type FleetNames } from "./names.js";
import type { FleetStores } from "./setup.js";

/** Job messages a worker settled, by how: one counter for the worker and its dead letters. */
export const JOBS_HELP = "Job messages this worker settled, by how (finished, error, abandoned, skipped, dead).";

/** Where a worker's dead letters go and who it is. */
export interface DeadLetterTarget {
  js: JetStreamClient;
  names: FleetNames;
  stores: FleetStores;
  /** The worker sending it (a header of the letter). */
  worker: string;
  metrics: FleetMetrics;
  log: RunnerLog;
}

/**
 * Moves a job message that cannot start to the dead-letter stream (stored once: its dedupe id is
 * the attempt), and reports the attempt's error to the coordinator through the events stream, so
 * the flow goes on (retries, or its end); only then is the message terminated and the attempt
 * marked `done`. A report that cannot be stored now leaves the message to come again.
 */
export async function sendToDeadLetters(
  to: DeadLetterTarget,
  m: JsMsg,
  reason: string,
  payload?: DeliveryPayload,
): Promise<void> {
  const { names, metrics } = to;
  const type = payload ? ((payload.message.job[0] as RunnerJob).script_type ?? "unknown") : "unknown";
  const ref = payload ? attemptOf(payload) : undefined;
  const h = natsHeaders();
  h.set("Fleet-Reason", reason.slice(0, 1000));
  h.set("Fleet-Deliveries", String(m.info.deliveryCount));
  h.set("Fleet-Worker", to.worker);
  h.set("Fleet-Subject", m.subject);
  const subject = ref ? names.dead(type, ref) : `${names.deadFilter.slice(0, -1)}unreadable.${m.seq}`;
  const stored = await to.js.publish(subject, m.data, { headers: h, msgID: `dead.${ref ? attemptId(ref) : m.seq}` });
  metrics.count("fleet_dead_letters_total", "Job messages sent to the dead letters.");
  to.log.warn(`dead letter (${names.deadStream} #${stored.seq}): ${reason}`);
  if (payload && ref) {
    const sink = new EventSink(to.js, names, ref, { worker: to.worker, delivery: m.info.deliveryCount });
    const error = `dead letter: ${reason} (kept in NATS stream ${names.deadStream} as message ${stored.seq})`;
    const reported = await sink.send(reportTarget(payload), "result", {
      attempt: payload.attempt,
      status: "error",
      error,
      result: {},
      logs: [],
    });
    // Not reported: it comes again, and the dead letter is stored once (its dedupe id).
    if (!reported.ok) return m.nak(5_000);
    await to.stores.gate.put(attemptId(ref), "done");
  }
  m.term();
  metrics.count("fleet_jobs_total", JOBS_HELP, { outcome: "dead" });
}
