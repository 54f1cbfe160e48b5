import { headers as natsHeaders, type NatsConnection } from "@nats-io/nats-core";
import { jetstream, type JetStreamClient } from "@nats-io/jetstream";
import { scriptTypeOf, type DeliveryPayload, type RunnerJob } from "../../shared/model/index.js";
import { sleep } from "../../shared/client/index.js";
import type { RunnerLog } from "../job.js";
import type { PostOutcome } from "../reporter.js";
import type { Acceptance, CancelRequest } from "../push-server.js";
import { deliveryKey, RecentAttempts } from "../recent-attempts.js";
import type { ReportSink } from "../report-sink.js";
import { declareAcknowledgedRemoved, removeAcknowledged, SWEEP_ACKNOWLEDGED_MS } from "./acknowledged.js";
import { FleetLoad } from "./load.js";
import type { FleetMetrics } from "./metrics.js";
import { attemptId, attemptOf, type AttemptRef, type FleetNames } from "./names.js";
import { startRelay, type Relay } from "./relay.js";
import type { FleetSetup, FleetStores } from "./setup.js";

/** What the gateway needs: the fleet, the registered runner it stands for, and where reports go. */
export interface GatewayOptions {
  nc: NatsConnection;
  names: FleetNames;
  stores: FleetStores;
  setup: FleetSetup;
  contextId: number;
  runnerId: number;
  /** Script types the fleet runs (a delivery of another is refused, 422). */
  scriptTypes: string[];
  /** At most this many jobs in the work stream, whatever the workers offer. */
  capacityCap?: number;
  sink: ReportSink;
  log: RunnerLog;
  metrics: FleetMetrics;
}

/** A running gateway. */
export interface Gateway {
  /** Push: a verified delivery; answered once JetStream stored it (or why not). */
  accept(payload: DeliveryPayload): Promise<Acceptance>;
  /** Pull: a leased delivery, stored and then acknowledged to the coordinator. */
  take(payload: DeliveryPayload, ack: () => Promise<PostOutcome>): void;
  /** The coordinator cancels an attempt: the gate keeps it from starting later, and workers are told. */
  cancel(request: CancelRequest): Promise<boolean>;
  /** Jobs the fleet can hold now (live workers' slots, capped). */
  capacity(): Promise<number>;
  /** Job messages in the work stream (waiting or running). */
  depth(): Promise<number>;
  /** Room in the fleet as last read (pull: how many to lease). */
  room(): number;
  /**
   * Takes no new work, waits for the fleet's running jobs' results to be relayed (at most
   * `timeoutMs`, or until `hurry` is aborted: only what is being relayed is finished), then stops.
   */
  drain(timeoutMs: number, hurry: AbortSignal): Promise<void>;
  /** Refuses new deliveries from now on (the first step of a drain). */
  refuseNew(): void;
  relay: Relay;
}

/**
 * The gateway: to the coordinator it is one registered runner. A delivery is verified (by the
 * push server, before this sees it), then published to the work stream with the attempt as its
 * dedupe id, and answered 2xx only once JetStream stored it: that answer is the
 * acknowledgement. A delivery of an attempt this gateway stored lately (its first answer was lost)
 * is answered `duplicate` and dropped, before anything else is looked at (RecentAttempts, as the
 * reference runner does); one this gateway does not remember (it restarted, another gateway took
 * the first) is stored once by JetStream's dedupe, and one JetStream forgot too (a NATS restart
 * keeps only the dedupe ids of messages still in the stream) finds the gate `done` and is not run
 * again. The fleet's capacity is the live workers' slots (or
 * `capacityCap`); a delivery beyond it is answered 429, so the coordinator tries again later.
 * Reports come back through the relay. Every few seconds it removes acknowledged job messages
 * NATS kept (acknowledged.ts).
 */
export function startGateway(options: GatewayOptions): Gateway {
  return new FleetGateway(options);
}

class FleetGateway implements Gateway {
  readonly relay: Relay;
  private readonly js: JetStreamClient;
  private readonly load: FleetLoad;
  private isDraining = false;
  private readonly sweeper: NodeJS.Timeout;
  /**
   * Attempts stored lately: a repeat is dropped here without a round trip to NATS, and still is
   * after a NATS restart, which forgets the dedupe ids of messages already taken off the stream.
   */
  private readonly recent: RecentAttempts;

  constructor(private readonly options: GatewayOptions) {
    const { nc, names, stores, log, metrics } = options;
    this.js = jetstream(nc);
    this.recent = new RecentAttempts({ warn: log.warn });
    this.load = new FleetLoad(stores, names, options.capacityCap);
    this.relay = startRelay({
      nc,
      names,
      sink: options.sink,
      ackWaitMs: options.setup.ackWaitSeconds * 1000,
      lost: (ref, why) =>
        void this.lost(ref, why).catch((error: Error) => log.warn(`cannot cancel ${attemptId(ref)}: ${error.message}`)),
      settled: (event, by) => {
        if (event.event === "result") this.load.settle(by);
      },
      log,
      metrics,
    });
    declareAcknowledgedRemoved(metrics);
    this.sweeper = setInterval(() => void this.removeAcknowledged(), SWEEP_ACKNOWLEDGED_MS);
  }

  refuseNew(): void {
    this.isDraining = true;
  }

  async accept(payload: DeliveryPayload): Promise<Acceptance> {
    const refused = this.refusal(payload);
    if (refused && refused !== "draining") return refused;
    // A repeat is answered 2xx whatever the fleet's state now (draining, full), as the first was.
    if (this.isRepeat(payload)) return "duplicate";
    if (refused) return refused;
    try {
      await this.load.fresh();
      if (this.load.depth >= this.load.capacity) {
        this.options.metrics.count("fleet_deliveries_total", DELIVERIES_HELP, { outcome: "busy" });
        return "busy";
      }
      return (await this.publish(payload)) === "duplicate" ? "duplicate" : "accepted";
    } catch (error) {
      this.options.log.warn(`cannot store a delivery in NATS: ${(error as Error).message}`);
      return { unavailable: `the fleet's NATS cannot take it now: ${(error as Error).message}` };
    }
  }

  take(payload: DeliveryPayload, ack: () => Promise<PostOutcome>): void {
    const refused = this.refusal(payload);
    if (refused && refused !== "draining") {
      const why = typeof refused === "string" ? refused : refused.refused;
      this.options.log.warn(`leased job ${payload.job_id} not taken: ${why}`);
      return;
    }
    // Leased again (as the reference runner does with a repeated lease): dropped, not stored twice.
    if (this.isRepeat(payload)) return;
    // Leased means ours: it is stored even while draining, and acknowledged before any of its
    // events go. Its place is taken now, so the pull loop does not lease past the fleet's room.
    this.load.reserve(1);
    const ref = attemptOf(payload);
    void this.relay.enqueue(ref, async () => {
      await this.publish(payload, true);
      const acked = await ack();
      // Not ours after all (or no answer): it must not run.
      if (!acked.ok) await this.lost(ref, `the coordinator did not take its ack: ${acked.detail}`);
    });
  }

  async cancel(request: CancelRequest): Promise<boolean> {
    await this.lost(request, request.reason);
    return true;
  }

  async capacity(): Promise<number> {
    await this.load.fresh();
    return this.load.capacity;
  }

  async depth(): Promise<number> {
    await this.load.fresh();
    return this.load.depth;
  }

  room(): number {
    return this.load.room;
  }

  async drain(timeoutMs: number, hurry: AbortSignal): Promise<void> {
    this.isDraining = true;
    const until = Date.now() + timeoutMs;
    // The fleet's jobs report through us: wait until those running (even on draining workers)
    // are done and their events relayed; jobs still waiting only while some worker may take them.
    while (!hurry.aborted) {
      const { waiting, jobs } = await this.leftToRelay();
      if (waiting === 0 && jobs === 0) break;
      if (Date.now() > until) {
        this.options.log.warn(
          `gateway drain: gave up waiting (${jobs} job(s) in the fleet, ${waiting} event(s) to relay)`,
        );
        break;
      }
      await sleep(250);
    }
    clearInterval(this.sweeper);
    await this.removeAcknowledged();
    await this.relay.stop();
  }

  /** Events still to relay, and jobs the fleet may still report on (running, or waiting while a worker lives). */
  private async leftToRelay(): Promise<{ waiting: number; jobs: number }> {
    const { stores, names } = this.options;
    await this.load.refresh().catch(() => undefined);
    const events = await stores.jsm.consumers.info(names.eventsStream, names.gatewayConsumer).catch(() => undefined);
    const waiting = (events?.num_pending ?? 0) + (events?.num_ack_pending ?? 0) + this.relay.inFlight();
    return { waiting, jobs: this.load.capacity > 0 ? this.load.depth : this.load.running };
  }

  private async removeAcknowledged(): Promise<void> {
    const { stores, names, metrics, log } = this.options;
    await removeAcknowledged(stores, names, metrics, log).catch((error: Error) =>
      log.warn(`cannot look for acknowledged job messages in ${names.jobsStream}: ${error.message}`),
    );
  }

  /**
   * The attempt is over for the coordinator: marked `cancelled` in the gate (unless it is done),
   * so no worker starts it later, then running workers are told. The mark is awaited: a cancel
   * whose mark could not be written is not answered as done.
   */
  private async lost(ref: AttemptRef, why: string): Promise<void> {
    const { stores, nc, names } = this.options;
    const key = attemptId(ref);
    if ((await stores.gate.get(key))?.string() !== "done") await stores.gate.put(key, "cancelled");
    nc.publish(names.cancelSubject, JSON.stringify({ ...ref, reason: why }));
  }

  /** A delivery of an attempt stored lately: counted as a duplicate and dropped. */
  private isRepeat(payload: DeliveryPayload): boolean {
    if (!this.recent.has(deliveryKey(payload))) return false;
    this.options.metrics.count("fleet_deliveries_total", DELIVERIES_HELP, { outcome: "duplicate" });
    this.options.log.info(`a repeated delivery of job ${payload.job_id} (attempt ${payload.attempt}) dropped`);
    return true;
  }

  /**
   * Publishes a delivery; its place in the fleet is reserved already (`reserved`) or now. Once
   * JetStream stored it (or had it), it is remembered: from then on a repeat is dropped. Not
   * before: a repeat answered `duplicate` while the first's publish may still fail would be lost.
   */
  private async publish(payload: DeliveryPayload, reserved = false): Promise<"stored" | "duplicate"> {
    const ref = attemptOf(payload);
    const job = payload.message.job[0] as RunnerJob;
    const h = natsHeaders();
    h.set("Fleet-Attempt", String(payload.attempt));
    if (!reserved) this.load.reserve(1);
    let ack;
    try {
      ack = await this.js.publish(this.options.names.job(scriptTypeOf(job), ref), JSON.stringify(payload), {
        msgID: attemptId(ref),
        headers: h,
      });
    } catch (error) {
      this.load.reserve(-1);
      throw error;
    }
    if (ack.duplicate) this.load.reserve(-1);
    this.recent.release(deliveryKey(payload));
    const outcome = ack.duplicate ? "duplicate" : "stored";
    this.options.metrics.count("fleet_deliveries_total", DELIVERIES_HELP, { outcome });
    return outcome;
  }

  private refusal(payload: DeliveryPayload): { refused: string } | "draining" | undefined {
    const { contextId, runnerId, scriptTypes } = this.options;
    if (payload.context_id !== contextId || payload.runner_id !== runnerId)
      return { refused: `this delivery is for runner ${payload.runner_id} of context ${payload.context_id}` };
    const type = scriptTypeOf(payload.message.job[0] as RunnerJob);
    if (!scriptTypes.includes(type))
      return { refused: `this fleet does not run ${type} scripts (it runs ${scriptTypes.join(", ")})` };
    if (this.isDraining) return "draining";
    return undefined;
  }
}

const DELIVERIES_HELP = "Deliveries the gateway took from the coordinator, by outcome (stored, duplicate, busy).";
