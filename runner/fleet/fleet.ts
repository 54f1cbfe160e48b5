import { readFileSync } from "node:fs";
import { connect } from "@nats-io/transport-node";
import type { Hono } from "hono";
import { hostname } from "node:os";
import { importPublicKey, KEY_DIRECTORY_PATH, randomHex, runnerKeyId } from "../../shared/auth/index.js";
import { sleep } from "../../shared/client/index.js";
import { DEFAULT_BATCH, ReportBatcher } from "../batcher.js";
import { parseDelivery } from "../delivery.js";
import { executorFor, registerBuiltinExecutors } from "../executors/index.js";
import { ACK_RETRY_MS } from "../job.js";
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
import { fleetNames } from "./names.js";
import { mountOps, startOpsServer, type FleetOps } from "./ops.js";
import type { FleetOptions } from "./options.js";
import { DEFAULT_FLEET_SETUP, ensureFleet, type FleetSetup } from "./setup.js";
import { startFleetWorker, type FleetWorker } from "./worker.js";

const VERSION = (
  JSON.parse(readFileSync(new URL("../../package.json", import.meta.url), "utf8")) as { version: string }
).version;

/**
 * Starts a gateway, a worker or both (`combined`) of the fleet behind one registered runner:
 * connects to NATS (reconnecting for ever), sets up the fleet's streams, consumers and buckets,
 * and serves the operations routes. Drains like the single runner: SIGTERM, or a signed
 * `POST /admin/drain`.
 */
export async function startFleetRunner(options: RunnerOptions & { fleet: FleetOptions }): Promise<RunnerHandle> {
  const log = options.log ?? consoleLog;
  const { fleet, contextId, runnerId } = options;
  const setup: FleetSetup = { ...DEFAULT_FLEET_SETUP, ...fleet.setup };
  const scriptTypes = options.scriptTypes ?? ["python", "sh"];
  const isGateway = fleet.mode !== "worker";
  const isWorker = fleet.mode !== "gateway";
  registerBuiltinExecutors();
  if (isWorker) {
    const missing = scriptTypes.filter((t) => !executorFor(t));
    if (missing.length > 0) throw new Error(`no executor is registered for script type ${missing.join(", ")}`);
  }

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
  const names = fleetNames({ contextId, runnerId });
  /** This process in the fleet: its worker id, the name a drain must give. */
  const member = `${hostname().replace(/[^A-Za-z0-9_-]/g, "_")}-${process.pid}-${randomHex(3)}`;
  const stores = await ensureFleet(nc, names, setup);
  const metrics = new FleetMetrics();
  // The fleet's two consumers, read once per gauge at scrape time.
  const consumerPairs: [stream: string, consumer: string][] = [
    [names.jobsStream, names.workersConsumer],
    [names.eventsStream, names.gatewayConsumer],
  ];
  const consumers = (field: "num_pending" | "num_ack_pending" | "num_redelivered") =>
    Promise.all(
      consumerPairs.map(async ([stream, consumer]): Promise<[Record<string, string>, number]> => [
        { consumer },
        (await stores.jsm.consumers.info(stream, consumer))[field],
      ]),
    );
  metrics.gauge("fleet_consumer_pending", "Messages not yet delivered to a consumer (its lag).", () =>
    consumers("num_pending"),
  );
  metrics.gauge("fleet_consumer_ack_pending", "Messages delivered and not yet acknowledged (in flight).", () =>
    consumers("num_ack_pending"),
  );
  metrics.gauge("fleet_consumer_redelivered", "Messages delivered more than once and not yet acknowledged.", () =>
    consumers("num_redelivered"),
  );

  const stopping = new AbortController();
  let reporter: Reporter | undefined;
  let sink: ReportSink | undefined;
  let batcher: ReportBatcher | undefined;
  if (isGateway) {
    reporter = new Reporter({
      baseUrl: options.url,
      signer: { keyid: runnerKeyId(contextId, runnerId), key: await signingKey(options.key) },
      warn: log.warn,
    });
    const batch = options.batch ?? DEFAULT_BATCH;
    batcher = batch > 1 ? new ReportBatcher({ reporter, contextId, runnerId, max: batch, warn: log.warn }) : undefined;
    sink = batcher ?? new DirectSink(reporter);
  }

  const worker: FleetWorker | undefined = isWorker
    ? await startFleetWorker({
        nc,
        names,
        stores,
        setup,
        id: member,
        slots: options.concurrency ?? 4,
        scriptTypes,
        metrics,
        job: jobSettings(options, log, stopping.signal, scriptTypes),
      })
    : undefined;
  const gateway: Gateway | undefined =
    isGateway && sink
      ? startGateway({
          nc,
          names,
          stores,
          setup,
          contextId,
          runnerId,
          scriptTypes,
          ...(fleet.capacity === undefined ? {} : { capacityCap: fleet.capacity }),
          sink,
          log,
          metrics,
        })
      : undefined;
  if (gateway) {
    metrics.gauge("fleet_capacity", "Jobs the fleet takes at once (live workers' slots, capped).", async () => [
      [{}, await gateway.capacity()],
    ]);
    metrics.gauge("fleet_jobs_in_stream", "Job messages in the work stream (waiting or running).", async () => [
      [{}, await gateway.depth()],
    ]);
  }

  let drained: Promise<void> | undefined;
  let resolveFinished: () => void = () => undefined;
  const finished = new Promise<void>((resolve) => (resolveFinished = resolve));
  const draining = () => drained !== undefined;
  let server: PushServer | undefined;
  let opsServer: { url: string; close(): Promise<void> } | undefined;
  let pull: PullLoop | undefined;

  const natsUp = async () => {
    try {
      await Promise.race([nc.flush(), sleep(2_000).then(() => Promise.reject(new Error("no answer in 2 s")))]);
      return "connected";
    } catch (error) {
      return `unreachable: ${(error as Error).message}`;
    }
  };
  const coordinatorUp = async () => {
    try {
      const response = await fetch(new URL(KEY_DIRECTORY_PATH, options.url), { signal: AbortSignal.timeout(3_000) });
      return response.ok ? "reachable" : `answers ${response.status}`;
    } catch (error) {
      return `unreachable: ${(error as Error).message}`;
    }
  };
  const ops: FleetOps = {
    admin: { keyid: runnerKeyId(contextId, runnerId), key: await importPublicKey(options.key.x) },
    member,
    async health() {
      const nats = await natsUp();
      const coordinator = gateway ? await coordinatorUp() : "not needed (worker)";
      return { ok: nats === "connected" && (!gateway || coordinator === "reachable"), nats, coordinator };
    },
    async ready() {
      if (draining()) return { ok: false, why: "draining" };
      const nats = await natsUp();
      if (nats !== "connected") return { ok: false, why: `NATS ${nats}` };
      if (worker && worker.running() >= (options.concurrency ?? 4)) return { ok: false, why: "every slot is taken" };
      if (gateway && (await gateway.capacity()) === 0) return { ok: false, why: "no live worker in the fleet" };
      return { ok: true };
    },
    metrics: () => metrics.render(),
    async info() {
      const streams = [];
      for (const name of [names.jobsStream, names.eventsStream, names.deadStream]) {
        const info = await stores.jsm.streams.info(name).catch(() => undefined);
        streams.push({ name, subjects: info?.config.subjects ?? [], messages: info?.state.messages ?? null });
      }
      return {
        mode: fleet.mode,
        member,
        version: VERSION,
        context_id: contextId,
        runner_id: runnerId,
        ...(worker ? { worker: worker.id, slots: options.concurrency ?? 4, running: worker.running() } : {}),
        ...(gateway ? { capacity: await gateway.capacity(), jobs_in_stream: await gateway.depth() } : {}),
        script_types: scriptTypes,
        draining: draining(),
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
    },
    drain: () => void handle.drain(),
  };

  if (gateway && options.mode !== "pull") {
    server = await startPushServer({
      ...(await pushListening(options, log)),
      parse: parseDelivery(reporter!, log),
      accept: (payload) => gateway.accept(payload),
      cancel: (request) => gateway.cancel(request),
      routes: (app: Hono) => mountOps(app, ops),
      log,
    });
    log.info(
      `fleet gateway of runner ${runnerId} of context ${contextId} listening on ${server.url} (NATS ${fleet.servers.join(", ")}, streams ${names.jobsStream}, ${names.eventsStream})`,
    );
  } else {
    opsServer = await startOpsServer(ops, fleet.opsListen ?? { host: "127.0.0.1", port: 0 });
  }
  if (gateway && options.mode === "pull") {
    const parse = parseDelivery(reporter!, log);
    pull = startPullLoop({
      reporter: reporter!,
      contextId,
      runnerId,
      batch: options.batch ?? DEFAULT_BATCH,
      freeSlots: () => gateway.room(),
      slotFreed: () =>
        sleep(500).then(() =>
          gateway.capacity().then(
            () => undefined,
            () => undefined,
          ),
        ),
      parse,
      take: (payload) =>
        gateway.take(payload, () =>
          sink!.send(reportTarget(payload), "ack", { attempt: payload.attempt }, ACK_RETRY_MS),
        ),
      log,
    });
    log.info(`fleet gateway of runner ${runnerId} of context ${contextId} pulling from ${options.url}`);
  }
  if (worker) {
    log.info(
      `fleet worker ${worker.id} of runner ${runnerId} of context ${contextId} taking jobs from ${names.jobsStream} (slots ${options.concurrency ?? 4}, ${scriptTypes.join(", ")})`,
    );
  }
  if (opsServer) log.info(`operations on ${opsServer.url} (health, ready, metrics, info, admin/drain)`);

  const handle: RunnerHandle = {
    ...(server ? { url: server.url } : {}),
    ...(opsServer ? { opsUrl: opsServer.url } : {}),
    running: () => worker?.running() ?? 0,
    finished,
    drain: () =>
      (drained ??= (async () => {
        log.info(`draining the fleet ${fleet.mode}: taking no new work`);
        gateway?.refuseNew();
        await pull?.stop();
        await worker?.drain();
        await gateway?.drain(fleet.drainTimeoutMs ?? 600_000, stopping.signal);
        await server?.close();
        await opsServer?.close();
        await nc.drain().catch(() => undefined);
        const sent = batcher ? ` (${batcher.reports} reports sent in ${batcher.requests} batches)` : "";
        log.info(`drained${sent}`);
        resolveFinished();
      })()),
    stop: () => {
      stopping.abort("the runner was stopped");
      return handle.drain();
    },
  };
  return handle;
}
