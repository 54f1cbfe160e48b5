import { headers as natsHeaders, type NatsConnection } from "@nats-io/nats-core";
import { jetstream } from "@nats-io/jetstream";
import type { DeliveryPayload, RunnerJob } from "../../shared/model/index.js";
import { sleep } from "../../shared/client/index.js";
import type { RunnerLog } from "../job.js";
import type { PostOutcome } from "../reporter.js";
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
   * The fleet's capacity and the jobs in it (waiting or out with a worker, as the workers'
   * consumer counts them) as last read, and what changed since: jobs reserved (counted before
   * their publish, so deliveries at once cannot all pass the check), and results relayed. A job
   * leaves the fleet when its worker acknowledges it, just after its result is stored, while the
   * coordinator may already push the next job on the slot that result freed: counting the relayed
   * result as gone keeps that push from a false 429. A read keeps what changed while it ran.
   */
  const read = { at: 0, capacity: 0, depth: 0, reserved: 0, settled: 0, running: 0 };
  const depth = () => Math.max(0, read.depth + read.reserved - read.settled);
  let reading: Promise<void> | undefined;

  const refresh = (): Promise<void> =>
    (reading ??= (async () => {
      const before = { reserved: read.reserved, settled: read.settled };
      try {
        let slots = 0;
        for await (const key of await stores.workers.keys()) {
          const entry = await stores.workers.get(key);
          if (!entry || entry.operation !== "PUT") continue;
          const worker = entry.json<{ slots?: number; draining?: boolean }>();
          if (!worker.draining) slots += worker.slots ?? 0;
        }
        const info = await stores.jsm.consumers.info(names.jobsStream, names.workersConsumer);
        read.capacity = options.capacityCap === undefined ? slots : Math.min(slots, options.capacityCap);
        read.depth = info.num_pending + info.num_ack_pending;
        read.running = info.num_ack_pending;
        read.reserved -= before.reserved;
        read.settled -= before.settled;
        read.at = Date.now();
      } finally {
        reading = undefined;
      }
    })());
  const fresh = async () => {
    if (Date.now() - read.at > READ_EVERY_MS) await refresh();
  };

  /**
   * The attempt is over for the coordinator: marked `cancelled` in the gate (unless it is done),
   * so no worker starts it later, then running workers are told. The mark is awaited: a cancel
   * whose mark could not be written is not answered as done.
   */
  const lost = async (ref: AttemptRef, why: string): Promise<void> => {
    const key = attemptId(ref);
    if ((await stores.gate.get(key))?.string() !== "done") await stores.gate.put(key, "cancelled");
    nc.publish(names.cancelSubject, JSON.stringify({ ...ref, reason: why }));
  };
  const relay = startRelay({
    nc,
    names,
    sink: options.sink,
    ackWaitMs: options.setup.ackWaitSeconds * 1000,
    lost: (ref, why) =>
      void lost(ref, why).catch((error: Error) => log.warn(`cannot cancel ${attemptId(ref)}: ${error.message}`)),
    settled: (event, by) => {
      if (event.event === "result") read.settled += by;
    },
    log,
    metrics,
  });

  /** Publishes a delivery; its place in the fleet is reserved already (`reserved`) or now. */
  const publish = async (payload: DeliveryPayload, reserved = false): Promise<"stored" | "duplicate"> => {
    const ref = attemptOf(payload);
    const job = payload.message.job[0] as RunnerJob;
    const h = natsHeaders();
    h.set("Fleet-Attempt", String(payload.attempt));
    if (!reserved) read.reserved++;
    let ack;
    try {
      ack = await js.publish(names.job(job.script_type, ref), JSON.stringify(payload), {
        msgID: attemptId(ref),
        headers: h,
      });
    } catch (error) {
      read.reserved--;
      throw error;
    }
    if (ack.duplicate) read.reserved--;
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
      // Leased means ours: it is stored even while draining, and acknowledged before any of its
      // events go. Its place is taken now, so the pull loop does not lease past the fleet's room.
      read.reserved++;
      const ref = attemptOf(payload);
      void relay.enqueue(ref, async () => {
        await publish(payload, true);
        const acked = await ack();
        // Not ours after all (or no answer): it must not run.
        if (!acked.ok) await lost(ref, `the coordinator did not take its ack: ${acked.detail}`);
      });
    },
    async cancel(request) {
      await lost(request, request.reason);
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
    async drain(timeoutMs, hurry) {
      isDraining = true;
      const until = Date.now() + timeoutMs;
      // The fleet's jobs report through us: wait until those running (even on draining workers)
      // are done and their events relayed; jobs still waiting only while some worker may take them.
      while (!hurry.aborted) {
        await refresh().catch(() => undefined);
        const events = await stores.jsm.consumers
          .info(names.eventsStream, names.gatewayConsumer)
          .catch(() => undefined);
        const waiting = (events?.num_pending ?? 0) + (events?.num_ack_pending ?? 0) + relay.inFlight();
        const jobs = read.capacity > 0 ? read.depth : read.running;
        if (waiting === 0 && jobs === 0) break;
        if (Date.now() > until) {
          log.warn(`gateway drain: gave up waiting (${jobs} job(s) in the fleet, ${waiting} event(s) to relay)`);
          break;
        }
        await sleep(250);
      }
      await relay.stop();
    },
  };
}

const DELIVERIES_HELP = "Deliveries the gateway took from the coordinator, by outcome (stored, duplicate, busy).";
