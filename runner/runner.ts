import { tmpdir } from "node:os";
import path from "node:path";
import { importPrivateKey, runnerKeyId, type PrivateJwk, type PublicJwk } from "../shared/auth/index.js";
import { CoordinatorKeyDirectory } from "./coordinator-keys.js";
import { executorFor, registerBuiltinExecutors } from "./executors/index.js";
import { RunnerAttempts, type AttemptRules } from "./attempts.js";
import { DEFAULT_STARTED_AFTER_MS, type JobDeps, type RunnerLog } from "./job.js";
import { startPullLoop, type PullLoop } from "./pull-loop.js";
import { startPushServer, type PushServer, type PushServerOptions } from "./push-server.js";
import { MAX_ANSWER_WITHIN_MS } from "./answer-window.js";
import { DEFAULT_BATCH, ReportBatcher } from "./batcher.js";
import { parseDelivery } from "./delivery.js";
import type { FleetOptions } from "./fleet/options.js";
import { DirectSink } from "./report-sink.js";
import { Reporter } from "./reporter.js";

/** How to start a runner. Only the coordinator, the identity and the key are required. */
export interface RunnerOptions {
  /** The coordinator's base URL. */
  url: string;
  contextId: number;
  runnerId: number;
  /**
   * The runner's private key (the public part is what it was registered with). A fleet's worker
   * may have the public part alone: it signs nothing.
   */
  key: PrivateJwk | PublicJwk;
  /** `push` (default): serve deliveries over HTTP(S); `pull`: lease them. */
  mode?: "push" | "pull";
  /** Push: where to listen (default 127.0.0.1, port 0 = any free one). */
  listen?: { host: string; port: number };
  /** Push over HTTPS: the PEM certificate and key. */
  tls?: { cert: Buffer; key: Buffer };
  /** Jobs at once (default 4). */
  concurrency?: number;
  /** Parent of every job's fresh working directory (default `<tmp>/flow-runner`). */
  workDir?: string;
  /** Script types this runner runs (default python and sh); each needs a registered executor. */
  scriptTypes?: string[];
  /**
   * Up to this many jobs per lease (pull) and reports per signed request, through the batched
   * webhook (default DEFAULT_BATCH; 1: one request per report, to its own webhook).
   */
  batch?: number;
  /** Seconds between heartbeats of a running job (default 10). */
  heartbeatSeconds?: number;
  /** A job that ends within this many ms of its start reports only its result (default DEFAULT_STARTED_AFTER_MS). */
  startedAfterMs?: number;
  /**
   * Push: hold each delivery's answer up to this many ms for the job's end, and answer with its
   * result when it ended by then (no result webhook; see AnswerWindow). 0 (the default): answer
   * at once, report the result through the webhook.
   */
  answerWithinMs?: number;
  /** Accepted clock difference on delivery signatures, seconds (default 300, as the coordinator's). */
  skewSeconds?: number;
  /** Where job start/end lines and warnings go (default stdout / stderr). */
  log?: RunnerLog;
  /** Part of a fleet on NATS JetStream (gateway, worker or both) instead of a runner of its own: startFleetRunner. */
  fleet?: FleetOptions;
}

/** A started runner. */
export interface RunnerHandle {
  /** Push mode: the URL it listens at. */
  url?: string;
  /** A fleet member without a push server: where its operations routes are served. */
  opsUrl?: string;
  /** Resolves once the runner drained, however that was asked (a signal, or a fleet's signed `/admin/drain`). */
  finished: Promise<void>;
  /** Jobs running now. */
  running(): number;
  /** Takes no new work, lets running jobs finish and report, then closes. Idempotent. */
  drain(): Promise<void>;
  /** Like drain, but kills running jobs first (they report an error). */
  stop(): Promise<void>;
}

/** The default log: one line per event, stamped, job lines on stdout and warnings on stderr. */
export const consoleLog: RunnerLog = {
  info: (line) => process.stdout.write(`${new Date().toISOString()} ${line}\n`),
  warn: (line) => process.stderr.write(`${new Date().toISOString()} warning: ${line}\n`),
};

/**
 * Starts the reference runner: push (an HTTP(S) server taking signed deliveries) or pull (a
 * lease loop), running up to `concurrency` jobs at once with the executors of its script types.
 */
export async function startRunner(options: RunnerOptions): Promise<RunnerHandle> {
  const log = options.log ?? consoleLog;
  const settings = runnerSettings(options);
  const signer = { keyid: runnerKeyId(options.contextId, options.runnerId), key: await signingKey(options.key) };
  const reporter = new Reporter({ baseUrl: options.url, signer, warn: log.warn });
  const stopping = new AbortController();
  const batcher =
    settings.batch > 1
      ? new ReportBatcher({
          reporter,
          contextId: options.contextId,
          runnerId: options.runnerId,
          max: settings.batch,
          warn: log.warn,
        })
      : undefined;
  const deps: JobDeps = {
    sink: batcher ?? new DirectSink(reporter),
    ...jobSettings(options, log, stopping.signal, settings.scriptTypes),
  };
  const attempts = new RunnerAttempts(deps, settings, log);
  const parse = parseDelivery(reporter, log);
  const what = `runner ${options.runnerId} of context ${options.contextId}`;
  const sizes = `concurrency ${settings.concurrency}, batch ${settings.batch}`;
  let server: PushServer | undefined;
  let pull: PullLoop | undefined;
  if (settings.mode === "push") {
    server = await startPushServer({
      ...(await pushListening(options, log)),
      signer,
      parse,
      accept: (payload) => attempts.accept(payload),
      cancel: (c) => attempts.cancel(c),
      health: () => ({
        status: attempts.draining ? "draining" : "ok",
        running: attempts.size,
        concurrency: settings.concurrency,
      }),
      log,
    });
    const answering =
      settings.answerWithinMs > 0 ? `, answering with results within ${settings.answerWithinMs} ms` : "";
    log.info(`${what} listening on ${server.url} (${sizes}${answering}, ${settings.scriptTypes.join(", ")})`);
  } else {
    pull = startPullLoop({
      reporter,
      contextId: options.contextId,
      runnerId: options.runnerId,
      batch: settings.batch,
      // Not the push slots: a lease before the coordinator applied the results would find no free slot there.
      freeSlots: () => settings.concurrency - attempts.size,
      slotFreed: () => attempts.slotFreed(),
      parse,
      take: (payload) => attempts.take(payload),
      log,
    });
    log.info(`${what} pulling from ${options.url} (${sizes}, ${settings.scriptTypes.join(", ")})`);
  }
  return runnerHandle({ attempts, log, stopping, batcher, ...(server ? { server } : {}), ...(pull ? { pull } : {}) });
}

/** A runner's options checked, with their defaults. */
function runnerSettings(options: RunnerOptions): AttemptRules & { mode: "push" | "pull"; batch: number } {
  const concurrency = options.concurrency ?? 4;
  const scriptTypes = options.scriptTypes ?? ["python", "sh"];
  if (!Number.isInteger(concurrency) || concurrency < 1)
    throw new Error(`concurrency must be a positive integer, not ${concurrency}`);
  registerBuiltinExecutors();
  const missing = scriptTypes.filter((t) => !executorFor(t));
  if (missing.length > 0) throw new Error(`no executor is registered for script type ${missing.join(", ")}`);
  const answerWithinMs = options.answerWithinMs ?? 0;
  if (!Number.isInteger(answerWithinMs) || answerWithinMs < 0 || answerWithinMs > MAX_ANSWER_WITHIN_MS)
    throw new Error(`answerWithinMs must be an integer from 0 to ${MAX_ANSWER_WITHIN_MS}, not ${answerWithinMs}`);
  const batch = options.batch ?? DEFAULT_BATCH;
  if (!Number.isInteger(batch) || batch < 1 || batch > 100)
    throw new Error(`batch must be an integer from 1 to 100, not ${batch}`);
  const mode = options.mode ?? "push";
  return {
    contextId: options.contextId,
    runnerId: options.runnerId,
    concurrency,
    scriptTypes,
    answerWithinMs,
    batch,
    mode,
  };
}

/** The handle of a started runner: its drain (once, however asked) and its stop. */
function runnerHandle(parts: {
  attempts: RunnerAttempts;
  log: RunnerLog;
  stopping: AbortController;
  batcher: ReportBatcher | undefined;
  server?: PushServer;
  pull?: PullLoop;
}): RunnerHandle {
  const { attempts, log, batcher, server, pull } = parts;
  let drained: Promise<void> | undefined;
  let resolveFinished: () => void = () => undefined;
  const finished = new Promise<void>((resolve) => (resolveFinished = resolve));
  const drain = () =>
    (drained ??= (async () => {
      attempts.draining = true;
      log.info(`draining: ${attempts.size} job(s) running, taking no new work`);
      await pull?.stop();
      await attempts.settled();
      await server?.close();
      const sent = batcher ? ` (${batcher.reports} reports sent in ${batcher.requests} batches)` : "";
      log.info(`drained${sent}`);
      resolveFinished();
    })());
  return {
    ...(server ? { url: server.url } : {}),
    running: () => attempts.size,
    finished,
    drain,
    stop: () => {
      parts.stopping.abort("the runner was stopped");
      return drain();
    },
  };
}

/** The runner's key for signing: a public key alone cannot sign its reports. */
export function signingKey(key: PrivateJwk | PublicJwk): Promise<CryptoKey> {
  if (!("d" in key))
    throw new Error("the runner signs its reports: --key-file must hold its private key, not only the public one");
  return importPrivateKey(key);
}

/** How jobs run with these options: everything a job needs but where its reports go. */
export function jobSettings(
  options: RunnerOptions,
  log: RunnerLog,
  stopSignal: AbortSignal,
  scriptTypes: string[],
): Omit<JobDeps, "sink"> {
  return {
    workDir: options.workDir ?? path.join(tmpdir(), "flow-runner"),
    heartbeatSeconds: options.heartbeatSeconds ?? 10,
    startedAfterMs: options.startedAfterMs ?? DEFAULT_STARTED_AFTER_MS,
    log,
    stopSignal,
    executorFor: (type) => (scriptTypes.includes(type) ? executorFor(type) : undefined),
  };
}

/**
 * Where a push server of these options listens (default 127.0.0.1, any free port) and how it
 * verifies deliveries: the coordinator's keys, loaded now.
 */
export async function pushListening(
  options: RunnerOptions,
  log: RunnerLog,
): Promise<Pick<PushServerOptions, "host" | "port" | "tls" | "keys" | "skewSeconds">> {
  const keys = new CoordinatorKeyDirectory(options.url, log.warn);
  await keys.load();
  return {
    host: options.listen?.host ?? "127.0.0.1",
    port: options.listen?.port ?? 0,
    ...(options.tls ? { tls: options.tls } : {}),
    keys,
    skewSeconds: options.skewSeconds ?? 300,
  };
}
