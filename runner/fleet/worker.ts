import { headers as natsHeaders, type NatsConnection, type Subscription } from "@nats-io/nats-core";
import { jetstream, type Consumer, type ConsumerMessages, type JsMsg } from "@nats-io/jetstream";
import { sleep } from "../../shared/client/index.js";
import { DeliveryPayload, type RunnerJob } from "../../shared/model/index.js";
import { describeAttempt, runDelivery, type JobDeps } from "../job.js";
import { reportTarget } from "../report-sink.js";
import { EventSink } from "./events.js";
import type { FleetMetrics } from "./metrics.js";
import { attemptId, attemptOf, type AttemptRef, type FleetNames } from "./names.js";
import { retryFor } from "./retry.js";
import { WORKER_TTL_MS, type FleetSetup, type FleetStores } from "./setup.js";

/** What a worker needs: the fleet, its slots and script types, and how to run a job. */
export interface FleetWorkerOptions {
  nc: NatsConnection;
  names: FleetNames;
  stores: FleetStores;
  setup: FleetSetup;
  /** The worker's id in the fleet (its entry among the live workers, its events' dedupe ids). */
  id: string;
  /** Jobs at once on this worker. */
  slots: number;
  scriptTypes: string[];
  /** Everything running a job needs but where its reports go (each run gets an EventSink). */
  job: Omit<JobDeps, "sink">;
  metrics: FleetMetrics;
}

/** A running worker. */
export interface FleetWorker {
  id: string;
  running(): number;
  /** Takes no more job messages, lets running jobs finish and store their results, then stops. */
  drain(): Promise<void>;
}

/** A worker waits this long for job messages per fetch. */
const FETCH_EXPIRES_MS = 5_000;
/** Marking a finished attempt done in the gate is retried this long while NATS is away. */
const SETTLE_FOR_MS = 120_000;
const JOBS_HELP = "Job messages this worker settled, by how (finished, error, abandoned, skipped, dead).";
/** A cancel of an attempt not running here is remembered this long. */
const CANCEL_MEMORY_MS = 10 * 60_000;

/**
 * A worker of the fleet: takes job messages from the shared durable consumer (never more than
 * its free slots), runs each with the runner's executors, publishes its reports as events, and
 * acknowledges the message only once the result event is stored and the idempotency gate says
 * the attempt is done. A message redelivered after that (its ack was lost) is acknowledged
 * without running; one redelivered because its worker died runs again here. A message that
 * cannot start (unreadable, a script type no live worker runs, or started `maxDeliver` times
 * without finishing, as the gate counts) goes to the dead letters and is reported to the
 * coordinator as the attempt's error. Deliveries alone are not counted: a worker that lacks the
 * job's script type, or is draining, hands it back without using up its chances.
 */
export async function startFleetWorker(options: FleetWorkerOptions): Promise<FleetWorker> {
  const { nc, names, stores, setup, slots, scriptTypes, metrics } = options;
  const log = options.job.log;
  const js = jetstream(nc);
  const id = options.id;
  const running = new Map<string, { cancel: AbortController; done: Promise<void> }>();
  let draining = false;
  let waiters: (() => void)[] = [];
  const wake = () => {
    const woken = waiters;
    waiters = [];
    for (const w of woken) w();
  };

  const announce = async () => {
    const entry = { slots, running: running.size, script_types: scriptTypes, draining, pid: process.pid };
    await stores.workers.put(id, JSON.stringify(entry)).catch(() => undefined);
  };
  await announce();
  const announcer = setInterval(() => void announce(), WORKER_TTL_MS / 3);

  /**
   * Attempts cancelled while not running here, for a while: a cancel that comes between a job
   * message's gate check and its start (the gate's own mark may not have been read) still stops it.
   */
  const cancelled = new Map<string, number>();
  // Stops an attempt the gateway says is over (the coordinator cancelled it or moved on).
  const cancels: Subscription = nc.subscribe(names.cancelSubject, {
    callback: (error, msg) => {
      if (error) return;
      try {
        const ref = msg.json<AttemptRef & { reason?: string }>();
        const key = attemptId(ref);
        const run = running.get(key);
        if (run) run.cancel.abort(`cancelled: ${ref.reason ?? "the attempt is over"}`);
        else cancelled.set(key, Date.now() + CANCEL_MEMORY_MS);
        if (cancelled.size > 1000) for (const [k, until] of cancelled) if (until < Date.now()) cancelled.delete(k);
      } catch {
        // Not a cancel of ours.
      }
    },
  });

  /** Script types some live worker of the fleet runs (read at most every few seconds). */
  let liveTypes = { at: 0, types: new Set<string>() };
  const runByOthers = async (type: string): Promise<boolean> => {
    if (Date.now() - liveTypes.at > WORKER_TTL_MS / 3) {
      const types = new Set<string>();
      for await (const worker of await stores.workers.keys()) {
        const entry = await stores.workers.get(worker);
        if (entry?.operation === "PUT")
          for (const t of entry.json<{ script_types?: string[] }>().script_types ?? []) types.add(t);
      }
      liveTypes = { at: Date.now(), types };
    }
    return liveTypes.types.has(type);
  };

  const deadLetter = async (m: JsMsg, reason: string, payload?: DeliveryPayload) => {
    const type = payload ? (payload.message.job[0] as RunnerJob).script_type : "unknown";
    const ref = payload ? attemptOf(payload) : undefined;
    const h = natsHeaders();
    h.set("Fleet-Reason", reason.slice(0, 1000));
    h.set("Fleet-Deliveries", String(m.info.deliveryCount));
    h.set("Fleet-Worker", id);
    h.set("Fleet-Subject", m.subject);
    const subject = ref ? names.dead(type, ref) : `${names.deadFilter.slice(0, -1)}unreadable.${m.seq}`;
    const stored = await js.publish(subject, m.data, { headers: h, msgID: `dead.${ref ? attemptId(ref) : m.seq}` });
    metrics.count("fleet_dead_letters_total", "Job messages sent to the dead letters.");
    log.warn(`dead letter (${names.deadStream} #${stored.seq}): ${reason}`);
    if (payload && ref) {
      const sink = new EventSink(js, names, ref, { worker: id, delivery: m.info.deliveryCount });
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
      await stores.gate.put(attemptId(ref), "done");
    }
    m.term();
    metrics.count("fleet_jobs_total", JOBS_HELP, { outcome: "dead" });
  };

  const take = async (m: JsMsg) => {
    const delivery = m.info.deliveryCount;
    if (delivery > 1)
      metrics.count("fleet_redeliveries_total", "Job messages this worker got again (a worker died or let one go).");
    let raw: unknown;
    try {
      raw = m.json();
    } catch {
      return deadLetter(m, `message ${m.seq} on ${m.subject} is not JSON`);
    }
    const parsed = DeliveryPayload.safeParse(raw);
    if (!parsed.success) return deadLetter(m, `message ${m.seq} on ${m.subject} is not a delivery`);
    const payload = parsed.data;
    const job = payload.message.job[0] as RunnerJob | undefined;
    if (!job) return deadLetter(m, `message ${m.seq} carries no job`);
    const label = describeAttempt(payload, job);
    const ref = attemptOf(payload);
    const key = attemptId(ref);
    // The gate: `done` or `cancelled` ends it here; `running:<n>` counts its starts so far.
    const gate = await stores.gate.get(key);
    const state = gate?.operation === "PUT" ? gate.string() : "";
    if (state === "done" || state === "cancelled" || (cancelled.get(key) ?? 0) > Date.now()) {
      log.info(`${label} not run: it is ${state || "cancelled"} (delivery ${delivery})`);
      metrics.count("fleet_jobs_total", JOBS_HELP, { outcome: "skipped" });
      return m.ack();
    }
    const starts = state.startsWith("running:") ? Number(state.slice("running:".length)) || 0 : 0;
    if (starts >= setup.maxDeliver) {
      return deadLetter(m, `${label} was started ${starts} times and never finished`, payload);
    }
    if (!scriptTypes.includes(job.script_type)) {
      // Another worker may run it: its deliveries here do not count. Only when no live worker
      // runs its type does it become poison.
      if (!(await runByOthers(job.script_type)) && delivery >= setup.maxDeliver)
        return deadLetter(
          m,
          `${label}: no live worker runs ${job.script_type} scripts (delivered ${delivery} times)`,
          payload,
        );
      return m.nak(1_000);
    }
    if (draining) return m.nak(1_000);
    if (running.has(key)) return m.working();
    await stores.gate.put(key, `running:${starts + 1}`);

    const cancel = new AbortController();
    const sink = new EventSink(js, names, ref, { worker: id, delivery });
    const began = Date.now();
    // In-progress acks keep the message ours while the job runs, however long.
    const keepAlive = setInterval(() => m.working(), (setup.ackWaitSeconds * 1000) / 3);
    const done = (async () => {
      try {
        const end = await runDelivery(payload, { ...options.job, sink }, { ack: false, cancel: cancel.signal });
        metrics.observeDuration((Date.now() - began) / 1000, { script_type: job.script_type });
        if (!sink.resultStored) {
          // The result is not in NATS: let another delivery run it rather than lose it.
          log.warn(`${label}: its result could not be stored; the job message goes back`);
          m.nak(5_000);
          return;
        }
        await retryFor(() => stores.gate.put(key, "done"), SETTLE_FOR_MS);
        // An ack lost on the way (NATS restarting) cannot be sent again (the client counts it
        // sent); the message then comes again, and the gate's `done` keeps it from running.
        if (!(await m.ackAck().catch(() => false)))
          log.info(`${label}: the ack of its job message was not confirmed; the gate stops a redelivery`);
        metrics.count("fleet_jobs_total", JOBS_HELP, { outcome: end.status });
      } finally {
        clearInterval(keepAlive);
      }
    })()
      .catch((error: Error) => log.warn(`${label}: ${error.message}`))
      .finally(() => {
        running.delete(key);
        wake();
      });
    running.set(key, { cancel, done });
  };

  let batch: ConsumerMessages | undefined;
  const consume = async () => {
    let consumer: Consumer | undefined;
    while (!draining) {
      const free = slots - running.size;
      if (free <= 0) {
        await new Promise<void>((resolve) => waiters.push(resolve));
        continue;
      }
      try {
        consumer ??= await js.consumers.get(names.jobsStream, names.workersConsumer);
        batch = await consumer.fetch({ max_messages: free, expires: FETCH_EXPIRES_MS });
        for await (const m of batch) await take(m);
      } catch (error) {
        if (draining) break;
        log.warn(`worker ${id}: fetching jobs failed: ${(error as Error).message}; trying again`);
        consumer = undefined;
        await sleep(1_000);
      }
    }
  };
  const loop = consume();

  metrics.gauge("fleet_worker_in_flight", "Jobs running on this worker now.", () => [[{ worker: id }, running.size]]);
  metrics.gauge("fleet_worker_slots", "Jobs this worker runs at once.", () => [[{ worker: id }, slots]]);

  let drained: Promise<void> | undefined;
  return {
    id,
    running: () => running.size,
    drain: () =>
      (drained ??= (async () => {
        draining = true;
        wake();
        batch?.stop();
        await announce();
        log.info(`worker ${id} draining: ${running.size} job(s) running, taking no new work`);
        await loop;
        while (running.size > 0) await Promise.all([...running.values()].map((r) => r.done));
        clearInterval(announcer);
        cancels.unsubscribe();
        await stores.workers.delete(id).catch(() => undefined);
        log.info(`worker ${id} drained`);
      })()),
  };
}
