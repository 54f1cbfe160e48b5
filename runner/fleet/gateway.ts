import { headers as natsHeaders, type NatsConnection } from "@nats-io/nats-core";
import { jetstream } from "@nats-io/jetstream";
import type { DeliveryPayload, RunnerJob } from "../../shared/model/index.js";
import type { RunnerLog } from "../job.js";
import type { Acceptance, CancelRequest } from "../push-server.js";
import type { ReportSink } from "../report-sink.js";
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
  take(payload: DeliveryPayload, ack: () => Promise<unknown>): void;
  /** The coordinator cancels an attempt: workers are told, and the gate keeps it from starting later. */
  cancel(request: CancelRequest): boolean;
  /** Jobs the fleet can hold now (live workers' slots, capped). */
  capacity(): Promise<number>;
  /** Job messages in the work stream (waiting or running). */
  depth(): Promise<number>;
  /** Room in the fleet as last read (pull: how many to lease). */
  room(): number;
  /** Takes no new work, waits for the fleet's running jobs' results to be relayed, then stops. */
  drain(timeoutMs: number): Promise<void>;
  /** Refuses new deliveries from now on (the first step of a drain). */
  refuseNew(): void;
  relay: Relay;
}

/** The fleet's capacity and the work stream's depth are read again after this long (ms). */
const READ_EVERY_MS = 500;

/**
 * The gateway: to the coordinator it is one registered runner. A delivery is verified (by the
 * push server, before this sees it), then published to the work stream with the attempt as its
 * dedupe id, and answered 2xx only once JetStream stored it: that answer is the
 * acknowledgement. The fleet's capacity is the live workers' slots (or `capacityCap`); a
 * delivery beyond it is answered 429, so the coordinator tries again later. Reports come back
 * through the relay.
 */
export function startGateway(options: GatewayOptions): Gateway {
  const { nc, names, stores, log, metrics } = options;
  const js = jetstream(nc);
  let isDraining = false;
  /**
   * The fleet's capacity and the work stream's depth as last read, and what changed since: jobs
   * published, and results relayed. A job leaves the stream when its worker acknowledges it, just
   * after the result is stored, while the coordinator may already push the next job on the slot
   * that result freed: counting the relayed result as gone keeps that push from a false 429.
   */
  const read = { at: 0, capacity: 0, depth: 0, published: 0, settled: 0 };
  const depth = () => Math.max(0, read.depth + read.published - read.settled);
  let reading: Promise<void> | undefined;

  const refresh = (): Promise<void> =>
    (reading ??= (async () => {
      try {
        let slots = 0;
        for await (const key of await stores.workers.keys()) {
          const entry = await stores.workers.get(key);
          if (!entry || entry.operation !== "PUT") continue;
          const worker = entry.json<{ slots?: number; draining?: boolean }>();
          if (!worker.draining) slots += worker.slots ?? 0;
        }
        const info = await stores.jsm.streams.info(names.jobsStream);
        read.capacity = options.capacityCap === undefined ? slots : Math.min(slots, options.capacityCap);
        read.depth = info.state.messages;
        read.published = 0;
        read.settled = 0;
        read.at = Date.now();
      } finally {
        reading = undefined;
      }
    })());
  const fresh = async () => {
    if (Date.now() - read.at > READ_EVERY_MS) await refresh();
  };

  const lost = (ref: AttemptRef, why: string) => {
    nc.publish(names.cancelSubject, JSON.stringify({ ...ref, reason: why }));
    void stores.gate.create(attemptId(ref), "cancelled").catch(() => undefined);
  };
  const relay = startRelay({
    nc,
    names,
    sink: options.sink,
    ackWaitMs: options.setup.ackWaitSeconds * 1000,
    lost,
    settled: (event, by) => {
      if (event.event === "result") read.settled += by;
    },
    log,
    metrics,
  });

  const publish = async (payload: DeliveryPayload): Promise<"stored" | "duplicate"> => {
    const ref = attemptOf(payload);
    const job = payload.message.job[0] as RunnerJob;
    const h = natsHeaders();
    h.set("Fleet-Attempt", String(payload.attempt));
    const ack = await js.publish(names.job(job.script_type, ref), JSON.stringify(payload), {
      msgID: attemptId(ref),
      headers: h,
    });
    read.published++;
    metrics.count("fleet_deliveries_total", DELIVERIES_HELP, { outcome: ack.duplicate ? "duplicate" : "stored" });
    return ack.duplicate ? "duplicate" : "stored";
  };

  const refusal = (payload: DeliveryPayload): { refused: string } | "draining" | undefined => {
    if (payload.context_id !== options.contextId || payload.runner_id !== options.runnerId)
      return { refused: `this delivery is for runner ${payload.runner_id} of context ${payload.context_id}` };
    const type = (payload.message.job[0] as RunnerJob).script_type;
    if (!options.scriptTypes.includes(type))
      return { refused: `this fleet does not run ${type} scripts (it runs ${options.scriptTypes.join(", ")})` };
    if (isDraining) return "draining";
    return undefined;
  };

  return {
    relay,
    refuseNew: () => void (isDraining = true),
    async accept(payload) {
      const refused = refusal(payload);
      if (refused) return refused;
      try {
        await fresh();
        if (depth() >= read.capacity) {
          metrics.count("fleet_deliveries_total", DELIVERIES_HELP, { outcome: "busy" });
          return "busy";
        }
        return (await publish(payload)) === "duplicate" ? "duplicate" : "accepted";
      } catch (error) {
        log.warn(`cannot store a delivery in NATS: ${(error as Error).message}`);
        return { unavailable: `the fleet's NATS cannot take it now: ${(error as Error).message}` };
      }
    },
    take(payload, ack) {
      const refused = refusal(payload);
      if (refused && refused !== "draining") {
        log.warn(`leased job ${payload.job_id} not taken: ${typeof refused === "string" ? refused : refused.refused}`);
        return;
      }
      // Leased means ours: it is stored even while draining, and acknowledged before any of its events go.
      void relay.enqueue(attemptOf(payload), async () => {
        await publish(payload);
        await ack();
      });
    },
    cancel(request) {
      lost(request, request.reason);
      return true;
    },
    capacity: async () => {
      await fresh();
      return read.capacity;
    },
    depth: async () => {
      await fresh();
      return depth();
    },
    room: () => Math.max(0, read.capacity - depth()),
    async drain(timeoutMs) {
      isDraining = true;
      const until = Date.now() + timeoutMs;
      // The fleet's running jobs report through us: wait until they are done and relayed.
      for (;;) {
        await refresh().catch(() => undefined);
        const events = await stores.jsm.consumers
          .info(names.eventsStream, names.gatewayConsumer)
          .catch(() => undefined);
        const waiting = (events?.num_pending ?? 0) + (events?.num_ack_pending ?? 0) + relay.inFlight();
        const jobs = read.capacity > 0 ? read.depth : 0;
        if (waiting === 0 && jobs === 0) break;
        if (Date.now() > until) {
          log.warn(`gateway drain: gave up waiting (${jobs} job(s) in the fleet, ${waiting} event(s) to relay)`);
          break;
        }
        await new Promise((resolve) => setTimeout(resolve, 250));
      }
      await relay.stop();
    },
  };
}

const DELIVERIES_HELP = "Deliveries the gateway took from the coordinator, by outcome (stored, duplicate, busy).";
