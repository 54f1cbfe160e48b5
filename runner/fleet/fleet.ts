import { readFileSync } from "node:fs";
import { hostname } from "node:os";
import type { NatsConnection } from "@nats-io/nats-core";
import { connect } from "@nats-io/transport-node";
import type { Hono } from "hono";
import { importPublicKey, KEY_DIRECTORY_PATH, randomHex, runnerKeyId } from "../../shared/auth/index.js";
import { sleep } from "../../shared/client/index.js";
import { DEFAULT_BATCH, ReportBatcher } from "../batcher.js";
import { parseDelivery } from "../delivery.js";
import { executorFor, registerBuiltinExecutors } from "../executors/index.js";
import { ACK_RETRY_MS, type RunnerLog } from "../job.js";
import { startPullLoop, type PullLoop } from "../pull-loop.js";
import { startPushServer, type PushServer } from "../push-server.js";
import { DirectSink, reportTarget, type ReportSink } from "../report-sink.js";
import { Reporter } from "../reporter.js";
import {
  consoleLog,
  jobSettings,
  pushListening,
  signingKey,
  type RunnerHandle,
  type RunnerOptions,
} from "../runner.js";
import { startGateway, type Gateway } from "./gateway.js";
import { FleetMetrics } from "./metrics.js";
import { fleetNames, type FleetNames } from "./names.js";
import { mountOps, startOpsServer, type FleetOps } from "./ops.js";
import type { FleetOptions } from "./options.js";
import { DEFAULT_FLEET_SETUP, ensureFleet, type FleetSetup, type FleetStores } from "./setup.js";
import { startFleetWorker, type FleetWorker } from "./worker.js";

const VERSION = (
  JSON.parse(readFileSync(new URL("../../package.json", import.meta.url), "utf8")) as { version: string }
).version;

/** A drain ends within `--drain-timeout` (default 10 minutes)… */
const DEFAULT_DRAIN_TIMEOUT_MS = 600_000;
/** …and the process exits at most this long after it, whatever is left (NATS away, a stuck close). */
const DRAIN_GRACE_MS = 15_000;

type FleetRunnerOptions = RunnerOptions & { fleet: FleetOptions };

/**
 * Starts a gateway, a worker or both (`combined`) of the fleet behind one registered runner:
 * connects to NATS (reconnecting for ever), sets up the fleet's streams, consumers and buckets,
 * and serves the operations routes. Drains like the single runner: SIGTERM, or a signed
 * `POST /admin/drain`; a drain ends within `--drain-timeout` in every mode.
 */
export async function startFleetRunner(options: FleetRunnerOptions): Promise<RunnerHandle> {
  const log = options.log ?? consoleLog;
  const scriptTypes = options.scriptTypes ?? ["python", "sh"];
  registerBuiltinExecutors();
  if (options.fleet.mode !== "gateway") {
    const missing = scriptTypes.filter((t) => !executorFor(t));
    if (missing.length > 0) throw new Error(`no executor is registered for script type ${missing.join(", ")}`);
  }
  const nc = await connectToNats(options, log);
  const names = fleetNames({ contextId: options.contextId, runnerId: options.runnerId });
  const setup: FleetSetup = { ...DEFAULT_FLEET_SETUP, ...options.fleet.setup };
  const stores = await ensureFleet(nc, names, setup);
  const admin = { keyid: runnerKeyId(options.contextId, options.runnerId), key: await importPublicKey(options.key.x) };
  const member = new FleetMember(options, { nc, names, stores, setup, scriptTypes, log }, admin);
  await member.startParts();
  await member.serve();
  return member.handle();
}

/** Connects to the fleet's NATS, reconnecting for ever and logging each loss and return. */
async function connectToNats(options: FleetRunnerOptions, log: RunnerLog): Promise<NatsConnection> {
  const { fleet, contextId, runnerId } = options;
  const nc = await connect({
    servers: fleet.servers,
    name: `flow-runner ${fleet.mode} of runner ${runnerId} in context ${contextId}`,
    maxReconnectAttempts: -1,
    reconnectTimeWait: 500,
  });
  void (async () => {
    for await (const status of nc.status()) {
      if (status.type === "disconnect") log.warn(`NATS connection lost (${fleet.servers.join(", ")}); reconnecting`);
      if (status.type === "reconnect") log.info("NATS connection back");
    }
  })();
  return nc;
}

/** What every part of a fleet member shares: NATS, the fleet's names and stores, and its settings. */
interface MemberBase {
  nc: NatsConnection;
  names: FleetNames;
  stores: FleetStores;
  setup: FleetSetup;
  scriptTypes: string[];
  log: RunnerLog;
}

/**
 * One process of the fleet, composed in order: its reporting (gateway), its worker, its gateway,
 * then its servers (push or pull, and the operations routes); it answers those routes itself
 * (FleetOps) and drains its parts in the reverse order.
 */
class FleetMember implements FleetOps {
  /** This process in the fleet: its worker id, the name a drain must give. */
  readonly member = `${hostname().replace(/[^A-Za-z0-9_-]/g, "_")}-${process.pid}-${randomHex(3)}`;
  private readonly metricsRegistry = new FleetMetrics();
  private readonly stopping = new AbortController();
  private reporter: Reporter | undefined;
  private sink: ReportSink | undefined;
  private batcher: ReportBatcher | undefined;
  private worker: FleetWorker | undefined;
  private gateway: Gateway | undefined;
  private server: PushServer | undefined;
  private opsServer: { url: string; close(): Promise<void> } | undefined;
  private pull: PullLoop | undefined;
  private drained: Promise<void> | undefined;
  private finish: () => void = () => undefined;
  private readonly finished = new Promise<void>((resolve) => (this.finish = resolve));

  constructor(
    private readonly options: FleetRunnerOptions,
    private readonly base: MemberBase,
    /** The runner's key id and public key: only it may drain this member. */
    readonly admin: FleetOps["admin"],
  ) {}

  private get slots(): number {
    return this.options.concurrency ?? 4;
  }

  /** Builds the parts this mode has: reporting and gateway, worker, and the consumers' gauges. */
  async startParts(): Promise<void> {
    const { options, base } = this;
    this.consumerGauges();
    if (options.fleet.mode !== "worker") await this.startReporting();
    if (options.fleet.mode !== "gateway") {
      this.worker = await startFleetWorker({
        ...base,
        id: this.member,
        slots: this.slots,
        metrics: this.metricsRegistry,
        job: jobSettings(options, base.log, this.stopping.signal, base.scriptTypes),
      });
    }
    if (this.sink) this.startGateway(this.sink);
  }

  /** The gateway's way to the coordinator: signed reports, batched unless `--batch 1`. */
  private async startReporting(): Promise<void> {
    const { options, base } = this;
    this.reporter = new Reporter({
      baseUrl: options.url,
      signer: { keyid: this.admin.keyid, key: await signingKey(options.key) },
      warn: base.log.warn,
    });
    const batch = options.batch ?? DEFAULT_BATCH;
    const { contextId, runnerId } = options;
    this.batcher =
      batch > 1
        ? new ReportBatcher({ reporter: this.reporter, contextId, runnerId, max: batch, warn: base.log.warn })
        : undefined;
    this.sink = this.batcher ?? new DirectSink(this.reporter);
  }

  private startGateway(sink: ReportSink): void {
    const { options, base } = this;
    const { capacity } = options.fleet;
    const gateway = startGateway({
      ...base,
      contextId: options.contextId,
      runnerId: options.runnerId,
      ...(capacity === undefined ? {} : { capacityCap: capacity }),
      sink,
      metrics: this.metricsRegistry,
    });
    this.gateway = gateway;
    const gauge = this.metricsRegistry.gauge.bind(this.metricsRegistry);
    gauge("fleet_capacity", "Jobs the fleet takes at once (live workers' slots, capped).", async () => [
      [{}, await gateway.capacity()],
    ]);
    gauge("fleet_jobs_in_stream", "Job messages in the work stream (waiting or running).", async () => [
      [{}, await gateway.depth()],
    ]);
  }

  /** The fleet's two consumers' counts, read once per gauge at scrape time. */
  private consumerGauges(): void {
    const { names, stores } = this.base;
    const pairs: [stream: string, consumer: string][] = [
      [names.jobsStream, names.workersConsumer],
      [names.eventsStream, names.gatewayConsumer],
    ];
    const read = (field: "num_pending" | "num_ack_pending" | "num_redelivered") => () =>
      Promise.all(
        pairs.map(async ([stream, consumer]): Promise<[Record<string, string>, number]> => [
          { consumer },
          (await stores.jsm.consumers.info(stream, consumer))[field],
        ]),
      );
    const m = this.metricsRegistry;
    m.gauge("fleet_consumer_pending", "Messages not yet delivered to a consumer (its lag).", read("num_pending"));
    m.gauge(
      "fleet_consumer_ack_pending",
      "Messages delivered and not yet acknowledged (in flight).",
      read("num_ack_pending"),
    );
    m.gauge(
      "fleet_consumer_redelivered",
      "Messages delivered more than once and not yet acknowledged.",
      read("num_redelivered"),
    );
  }

  /** Serves what this mode serves: the push server (with the operations routes), or the operations server; the pull loop. */
  async serve(): Promise<void> {
    const { options, base } = this;
    const { gateway, reporter } = this;
    const who = `of runner ${options.runnerId} of context ${options.contextId}`;
    if (gateway && reporter && options.mode !== "pull") {
      this.server = await startPushServer({
        ...(await pushListening(options, base.log)),
        parse: parseDelivery(reporter, base.log),
        accept: (payload) => gateway.accept(payload),
        cancel: (request) => gateway.cancel(request),
        routes: (app: Hono) => mountOps(app, this),
        log: base.log,
      });
      const streams = `streams ${base.names.jobsStream}, ${base.names.eventsStream}`;
      base.log.info(
        `fleet gateway ${who} listening on ${this.server.url} (NATS ${options.fleet.servers.join(", ")}, ${streams})`,
      );
    } else {
      this.opsServer = await startOpsServer(this, options.fleet.opsListen ?? { host: "127.0.0.1", port: 0 });
    }
    if (gateway && reporter && options.mode === "pull") {
      this.pull = this.startPulling(gateway, reporter);
      base.log.info(`fleet gateway ${who} pulling from ${options.url}`);
    }
    if (this.worker) {
      const from = `taking jobs from ${base.names.jobsStream} (slots ${this.slots}, ${base.scriptTypes.join(", ")})`;
      base.log.info(`fleet worker ${this.worker.id} ${who} ${from}`);
    }
    if (this.opsServer)
      base.log.info(`operations on ${this.opsServer.url} (health, ready, metrics, info, admin/drain)`);
  }

  /** A pulling gateway leases at most the fleet's room, and acknowledges each lease once stored. */
  private startPulling(gateway: Gateway, reporter: Reporter): PullLoop {
    const { options, base } = this;
    const sink = this.sink as ReportSink;
    return startPullLoop({
      reporter,
      contextId: options.contextId,
      runnerId: options.runnerId,
      batch: options.batch ?? DEFAULT_BATCH,
      freeSlots: () => gateway.room(),
      slotFreed: () => sleep(500).then(() => gateway.capacity().then(ignore, ignore)),
      parse: parseDelivery(reporter, base.log),
      take: (payload) =>
        gateway.take(payload, () =>
          sink.send(reportTarget(payload), "ack", { attempt: payload.attempt }, ACK_RETRY_MS),
        ),
      log: base.log,
    });
  }

  /** The runner's handle: its drain (once, however asked, bounded by --drain-timeout) and its stop. */
  handle(): RunnerHandle {
    return {
      ...(this.server ? { url: this.server.url } : {}),
      ...(this.opsServer ? { opsUrl: this.opsServer.url } : {}),
      running: () => this.worker?.running() ?? 0,
      finished: this.finished,
      drain: () => this.drainAll(),
      stop: () => {
        this.stopping.abort("the runner was stopped");
        return this.drainAll();
      },
    };
  }

  drain(): void {
    void this.drainAll();
  }

  /**
   * Takes no new work, lets the worker's jobs finish and the gateway relay the fleet's reports,
   * then closes. Bounded: after `--drain-timeout` the jobs still running are stopped (as on a
   * second signal: they report an error, and the coordinator retries them as their retries allow),
   * and the process is let go at most DRAIN_GRACE_MS later whatever is left.
   */
  private drainAll(): Promise<void> {
    return (this.drained ??= (async () => {
      const { log } = this.base;
      const timeoutMs = this.options.fleet.drainTimeoutMs ?? DEFAULT_DRAIN_TIMEOUT_MS;
      log.info(`draining the fleet ${this.options.fleet.mode}: taking no new work`);
      const timer = setTimeout(() => {
        log.warn(`drain timed out after ${timeoutMs / 1000} s: stopping the jobs still running`);
        this.stopping.abort("the drain timed out");
      }, timeoutMs);
      const gaveUp = sleep(timeoutMs + DRAIN_GRACE_MS).then(() => "late" as const);
      const outcome = await Promise.race([this.drainParts(timeoutMs).then(() => "drained" as const), gaveUp]);
      clearTimeout(timer);
      if (outcome === "late") log.warn("the drain did not end in time; exiting with what is left");
      else {
        const sent = this.batcher ? ` (${this.batcher.reports} reports sent in ${this.batcher.requests} batches)` : "";
        log.info(`drained${sent}`);
      }
      this.finish();
    })());
  }

  private async drainParts(timeoutMs: number): Promise<void> {
    this.gateway?.refuseNew();
    await this.pull?.stop();
    await this.worker?.drain();
    await this.gateway?.drain(timeoutMs, this.stopping.signal);
    await this.server?.close();
    await this.opsServer?.close();
    await Promise.race([this.base.nc.drain().catch(ignore), sleep(5_000)]);
  }

  metrics(): Promise<string> {
    return this.metricsRegistry.render();
  }

  async health(): Promise<{ ok: boolean } & Record<string, unknown>> {
    const nats = await natsUp(this.base.nc);
    const coordinator = this.gateway ? await coordinatorUp(this.options.url) : "not needed (worker)";
    return { ok: nats === "connected" && (!this.gateway || coordinator === "reachable"), nats, coordinator };
  }

  async ready(): Promise<{ ok: boolean } & Record<string, unknown>> {
    if (this.drained) return { ok: false, why: "draining" };
    const nats = await natsUp(this.base.nc);
    if (nats !== "connected") return { ok: false, why: `NATS ${nats}` };
    if (this.worker && this.worker.running() >= this.slots) return { ok: false, why: "every slot is taken" };
    if (this.gateway && (await this.gateway.capacity()) === 0) return { ok: false, why: "no live worker in the fleet" };
    return { ok: true };
  }

  async info(): Promise<Record<string, unknown>> {
    const { names, stores, nc, setup, scriptTypes } = this.base;
    const streams = [];
    for (const name of [names.jobsStream, names.eventsStream, names.deadStream]) {
      const info = await stores.jsm.streams.info(name).catch(() => undefined);
      streams.push({ name, subjects: info?.config.subjects ?? [], messages: info?.state.messages ?? null });
    }
    const { worker, gateway } = this;
    return {
      mode: this.options.fleet.mode,
      member: this.member,
      version: VERSION,
      context_id: this.options.contextId,
      runner_id: this.options.runnerId,
      ...(worker ? { worker: worker.id, slots: this.slots, running: worker.running() } : {}),
      ...(gateway ? { capacity: await gateway.capacity(), jobs_in_stream: await gateway.depth() } : {}),
      script_types: scriptTypes,
      draining: this.drained !== undefined,
      nats: nc.getServer(),
      streams,
      consumers: [
        { stream: names.jobsStream, name: names.workersConsumer },
        { stream: names.eventsStream, name: names.gatewayConsumer },
      ],
      buckets: [names.gateBucket, names.workersBucket],
      cancel_subject: names.cancelSubject,
      setup,
    };
  }
}

function ignore(): undefined {
  return undefined;
}

/** NATS answers a flush within 2 s: "connected", else why not. */
async function natsUp(nc: NatsConnection): Promise<string> {
  try {
    await Promise.race([nc.flush(), sleep(2_000).then(() => Promise.reject(new Error("no answer in 2 s")))]);
    return "connected";
  } catch (error) {
    return `unreachable: ${(error as Error).message}`;
  }
}

/** The coordinator's key directory answers within 3 s: "reachable", else how it answered. */
async function coordinatorUp(url: string): Promise<string> {
  try {
    const response = await fetch(new URL(KEY_DIRECTORY_PATH, url), { signal: AbortSignal.timeout(3_000) });
    return response.ok ? "reachable" : `answers ${response.status}`;
  } catch (error) {
    return `unreachable: ${(error as Error).message}`;
  }
}
