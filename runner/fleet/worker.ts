import type { Msg, NatsConnection, Subscription } from "@nats-io/nats-core";
import { jetstream, type Consumer, type ConsumerMessages, type JetStreamClient, type JsMsg } from "@nats-io/jetstream";
import { sleep } from "../../shared/client/index.js";
import { DeliveryPayload, scriptTypeOf, type RunnerJob } from "../../shared/model/index.js";
import { describeAttempt, runDelivery, type JobDeps } from "../job.js";
import { JOBS_HELP, sendToDeadLetters, type DeadLetterTarget } from "./dead-letter.js";
import { EventSink } from "./events.js";
import { isSuspect, readGate, startedAgain, type GateState } from "./gate.js";
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
/** A cancel of an attempt not running here is remembered this long. */
const CANCEL_MEMORY_MS = 10 * 60_000;

/** A job message read and checked: what to run, and its gate. */
interface Admitted {
  m: JsMsg;
  payload: DeliveryPayload;
  job: RunnerJob;
  key: string;
  label: string;
  gate: GateState;
}

/**
 * A worker of the fleet: takes job messages from the shared durable consumer (never more than
 * its free slots), runs each with the runner's executors, publishes its reports as events, and
 * acknowledges the message only once the result event is stored and the idempotency gate says
 * the attempt is done. A message redelivered after that (its ack was lost) is acknowledged
 * without running; one whose start is on record without a result (its worker died, or let it go)
 * is a suspect and runs alone here (gate.ts says why). A message that cannot start (unreadable, a
 * script type no live worker runs, or started `maxDeliver` times alone without finishing) goes to
 * the dead letters and is reported to the coordinator as the attempt's error. Deliveries alone
 * are not counted: a worker that lacks the job's script type, or is draining, hands it back
 * without using up its chances.
 */
export async function startFleetWorker(options: FleetWorkerOptions): Promise<FleetWorker> {
  const worker = new Worker(options);
  await worker.announce();
  worker.start();
  return worker;
}

class Worker implements FleetWorker {
  readonly id: string;
  private readonly js: JetStreamClient;
  private readonly log;
  private readonly jobs = new Map<string, { cancel: AbortController; done: Promise<void> }>();
  /** The suspect running alone here, if one is: nothing else is taken meanwhile. */
  private alone: string | undefined;
  /** A suspect came while jobs ran: take nothing more until they are done, then one at a time. */
  private clearing = false;
  private draining = false;
  private waiters: (() => void)[] = [];
  /**
   * Attempts cancelled while not running here, for a while: a cancel that comes between a job
   * message's gate check and its start (the gate's own mark may not have been read) still stops it.
   */
  private readonly cancelled = new Map<string, number>();
  /** Script types some live worker of the fleet runs (read at most every few seconds). */
  private liveTypes = { at: 0, types: new Set<string>() };
  private readonly deadLetters: DeadLetterTarget;
  private announcer: NodeJS.Timeout | undefined;
  private cancels: Subscription | undefined;
  private batch: ConsumerMessages | undefined;
  private loop: Promise<void> = Promise.resolve();
  private drained: Promise<void> | undefined;

  constructor(private readonly options: FleetWorkerOptions) {
    this.id = options.id;
    this.log = options.job.log;
    this.js = jetstream(options.nc);
    const { names, stores, metrics } = options;
    this.deadLetters = { js: this.js, names, stores, worker: this.id, metrics, log: this.log };
  }

  running(): number {
    return this.jobs.size;
  }

  /** Starts announcing itself, listening for cancels and taking job messages. */
  start(): void {
    const { nc, names, metrics, slots } = this.options;
    this.announcer = setInterval(() => void this.announce(), WORKER_TTL_MS / 3);
    // Stops an attempt the gateway says is over (the coordinator cancelled it or moved on).
    this.cancels = nc.subscribe(names.cancelSubject, {
      callback: (error, msg) => {
        if (!error) this.onCancel(msg);
      },
    });
    this.loop = this.consume();
    metrics.gauge("fleet_worker_in_flight", "Jobs running on this worker now.", () => [
      [{ worker: this.id }, this.jobs.size],
    ]);
    metrics.gauge("fleet_worker_slots", "Jobs this worker runs at once.", () => [[{ worker: this.id }, slots]]);
  }

  /** Its entry among the live workers: slots, load, script types (the gateway sums them). */
  async announce(): Promise<void> {
    const { slots, scriptTypes } = this.options;
    const entry = { slots, running: this.jobs.size, script_types: scriptTypes, draining: this.draining };
    await this.options.stores.workers
      .put(this.id, JSON.stringify({ ...entry, pid: process.pid }))
      .catch(() => undefined);
  }

  /** Takes no more job messages, lets running jobs finish and store their results, then stops. */
  drain(): Promise<void> {
    return (this.drained ??= (async () => {
      this.draining = true;
      this.wake();
      this.batch?.stop();
      await this.announce();
      this.log.info(`worker ${this.id} draining: ${this.jobs.size} job(s) running, taking no new work`);
      await this.loop;
      while (this.jobs.size > 0) await Promise.all([...this.jobs.values()].map((r) => r.done));
      clearInterval(this.announcer);
      this.cancels?.unsubscribe();
      await this.options.stores.workers.delete(this.id).catch(() => undefined);
      this.log.info(`worker ${this.id} drained`);
    })());
  }

  private wake(): void {
    const woken = this.waiters;
    this.waiters = [];
    for (const w of woken) w();
  }

  /** How many job messages to fetch now: none beside a suspect, nor while clearing for one. */
  private room(): number {
    if (this.alone !== undefined) return 0;
    if (this.clearing) return this.jobs.size === 0 ? 1 : 0;
    return this.options.slots - this.jobs.size;
  }

  private onCancel(msg: Msg): void {
    try {
      const ref = msg.json<AttemptRef & { reason?: string }>();
      const key = attemptId(ref);
      const run = this.jobs.get(key);
      if (run) run.cancel.abort(`cancelled: ${ref.reason ?? "the attempt is over"}`);
      else this.cancelled.set(key, Date.now() + CANCEL_MEMORY_MS);
      if (this.cancelled.size > 1000)
        for (const [k, until] of this.cancelled) if (until < Date.now()) this.cancelled.delete(k);
    } catch {
      // Not a cancel of ours.
    }
  }

  private async runByOthers(type: string): Promise<boolean> {
    if (Date.now() - this.liveTypes.at > WORKER_TTL_MS / 3) {
      const types = new Set<string>();
      const { workers } = this.options.stores;
      for await (const worker of await workers.keys()) {
        const entry = await workers.get(worker);
        if (entry?.operation === "PUT")
          for (const t of entry.json<{ script_types?: string[] }>().script_types ?? []) types.add(t);
      }
      this.liveTypes = { at: Date.now(), types };
    }
    return this.liveTypes.types.has(type);
  }

  private async consume(): Promise<void> {
    const { names } = this.options;
    let consumer: Consumer | undefined;
    while (!this.draining) {
      const room = this.room();
      if (room <= 0) {
        await new Promise<void>((resolve) => this.waiters.push(resolve));
        continue;
      }
      try {
        consumer ??= await this.js.consumers.get(names.jobsStream, names.workersConsumer);
        this.batch = await consumer.fetch({ max_messages: room, expires: FETCH_EXPIRES_MS });
        for await (const m of this.batch) await this.take(m);
      } catch (error) {
        if (this.draining) break;
        this.log.warn(`worker ${this.id}: fetching jobs failed: ${(error as Error).message}; trying again`);
        consumer = undefined;
        await sleep(1_000);
      }
    }
  }

  /** One job message: read, checked against the gate, then run (alone if it is a suspect) or handed back. */
  private async take(m: JsMsg): Promise<void> {
    if (m.info.deliveryCount > 1)
      this.options.metrics.count(
        "fleet_redeliveries_total",
        "Job messages this worker got again (a worker died or let one go).",
      );
    const admitted = await this.admit(m);
    if (!admitted) return;
    const suspect = isSuspect(admitted.gate);
    if (suspect && this.jobs.size > 0) {
      // It may be what killed a worker: it runs alone. Free this worker for it (or another takes it).
      this.clearing = true;
      return m.nak(1_000);
    }
    // Only a suspect's start counts as alone: it holds the worker to itself from start to end.
    await this.options.stores.gate.put(admitted.key, startedAgain(admitted.gate, suspect));
    if (suspect) {
      this.alone = admitted.key;
      this.log.info(`${admitted.label} runs alone: an earlier start of it never finished`);
    }
    this.clearing = false;
    this.run(admitted);
  }

  /** Reads a job message and checks it can run here; otherwise settles it (ack, nak, dead letter). */
  private async admit(m: JsMsg): Promise<Admitted | undefined> {
    const { stores, setup, scriptTypes, metrics } = this.options;
    const parsed = DeliveryPayload.safeParse(jsonOf(m));
    if (!parsed.success) return void (await this.deadLetter(m, `message ${m.seq} on ${m.subject} is not a delivery`));
    const payload = parsed.data;
    const job = payload.message.job[0] as RunnerJob | undefined;
    if (!job) return void (await this.deadLetter(m, `message ${m.seq} carries no job`));
    const label = describeAttempt(payload, job);
    const key = attemptId(attemptOf(payload));
    const entry = await stores.gate.get(key);
    const gate = readGate(entry?.operation === "PUT" ? entry.string() : "");
    if (gate.kind === "done" || gate.kind === "cancelled" || (this.cancelled.get(key) ?? 0) > Date.now()) {
      this.log.info(
        `${label} not run: it is ${gate.kind === "done" ? "done" : "cancelled"} (delivery ${m.info.deliveryCount})`,
      );
      metrics.count("fleet_jobs_total", JOBS_HELP, { outcome: "skipped" });
      return void m.ack();
    }
    if (gate.kind === "running" && gate.alone >= setup.maxDeliver)
      return void (await this.deadLetter(
        m,
        `${label} was started ${gate.alone} times alone on a worker and never finished`,
        payload,
      ));
    const type = scriptTypeOf(job);
    if (!scriptTypes.includes(type)) {
      // Another worker may run it: its deliveries here do not count. Only when no live worker
      // runs its type does it become poison.
      if (!(await this.runByOthers(type)) && m.info.deliveryCount >= setup.maxDeliver)
        return void (await this.deadLetter(
          m,
          `${label}: no live worker runs ${type} scripts (delivered ${m.info.deliveryCount} times)`,
          payload,
        ));
      return void m.nak(1_000);
    }
    if (this.draining) return void m.nak(1_000);
    if (this.jobs.has(key)) return void m.working();
    return { m, payload, job, key, label, gate };
  }

  private deadLetter(m: JsMsg, reason: string, payload?: DeliveryPayload): Promise<void> {
    return sendToDeadLetters(this.deadLetters, m, reason, payload);
  }

  /** Runs an admitted job; settles its message once its result is stored (or hands it back). */
  private run({ m, payload, job, key, label }: Admitted): void {
    const { setup, stores, metrics, names } = this.options;
    const cancel = new AbortController();
    const sink = new EventSink(this.js, names, attemptOf(payload), { worker: this.id, delivery: m.info.deliveryCount });
    const began = Date.now();
    // In-progress acks keep the message ours while the job runs, however long.
    const keepAlive = setInterval(() => m.working(), (setup.ackWaitSeconds * 1000) / 3);
    const done = (async () => {
      try {
        const end = await runDelivery(payload, { ...this.options.job, sink }, { ack: false, cancel: cancel.signal });
        metrics.observeDuration((Date.now() - began) / 1000, { script_type: scriptTypeOf(job) });
        if (!sink.resultStored) {
          // The result is not in NATS: let another delivery run it rather than lose it.
          this.log.warn(`${label}: its result could not be stored; the job message goes back`);
          m.nak(5_000);
          return;
        }
        await retryFor(() => stores.gate.put(key, "done"), SETTLE_FOR_MS);
        // An ack lost on the way (NATS restarting) cannot be sent again (the client counts it
        // sent); the message then comes again, and the gate's `done` keeps it from running.
        if (!(await m.ackAck().catch(() => false)))
          this.log.info(`${label}: the ack of its job message was not confirmed; the gate stops a redelivery`);
        metrics.count("fleet_jobs_total", JOBS_HELP, { outcome: end.status });
      } finally {
        clearInterval(keepAlive);
      }
    })()
      .catch((error: Error) => this.log.warn(`${label}: ${error.message}`))
      .finally(() => {
        this.jobs.delete(key);
        if (this.alone === key) this.alone = undefined;
        this.wake();
      });
    this.jobs.set(key, { cancel, done });
  }
}

/** A message's JSON, or undefined when it is not JSON (it then fails the delivery's schema). */
function jsonOf(m: JsMsg): unknown {
  try {
    return m.json();
  } catch {
    return undefined;
  }
}
