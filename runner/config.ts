import { readFile } from "node:fs/promises";
import path from "node:path";
import { parseArgs } from "node:util";
import { parsePrivateJwk, PublicJwk } from "../shared/auth/index.js";
import { MAX_ANSWER_WITHIN_MS } from "./answer-window.js";
import { DEFAULT_BATCH } from "./batcher.js";
import { DEFAULT_STARTED_AFTER_MS } from "./job.js";
import type { RunnerOptions } from "./runner.js";
import type { FleetOptions } from "./fleet/options.js";
import { DEFAULT_FLEET_SETUP } from "./fleet/setup.js";

/** What `--help` prints. */
export const USAGE = `Usage: npm run -s runner -- --url <coordinator> --context <id> --runner <id> --key-file <file> [options]

The reference runner of the flow coordinator: runs the python and sh jobs delivered to it.

Required (or from the environment):
  --url URL              the coordinator's base URL                          RUNNER_URL
  --context ID           the context the runner is registered in             RUNNER_CONTEXT
  --runner ID            the runner's id in that context                     RUNNER_ID
  --key-file FILE        the runner's Ed25519 private JWK                    RUNNER_KEY_FILE

Options:
  --listen HOST:PORT     push mode: where to take deliveries                 RUNNER_LISTEN
                         (default 127.0.0.1:8090; register the runner with this address)
  --pull                 pull mode: lease jobs instead of listening          RUNNER_MODE=push|pull
  --concurrency N        jobs at once (default 4)                            RUNNER_CONCURRENCY
  --work-dir DIR         where each job gets a fresh working directory       RUNNER_WORK_DIR
                         (default <tmp>/flow-runner; removed after each job)
  --script-types LIST    script types to run, comma-separated (default python,sh)  RUNNER_SCRIPT_TYPES
  --heartbeat SECONDS    heartbeat interval of a running job (default 10)    RUNNER_HEARTBEAT
  --started-after MS     report \`started\` only for a job still running MS     RUNNER_STARTED_AFTER
                         after its start (default ${DEFAULT_STARTED_AFTER_MS}): one that ends sooner
                         reports only its result (one request less); 0 reports it at once
  --answer-within MS     push: answer a delivery with the job's result when  RUNNER_ANSWER_WITHIN
                         the job ends within MS of its arrival (one message
                         instead of an answer and a result report; up to
                         ${MAX_ANSWER_WITHIN_MS}, default 0: answer at once; needs a coordinator
                         that reads results in answers)
  --batch N              up to N jobs per lease and N reports per signed     RUNNER_BATCH
                         request (1..100, default ${DEFAULT_BATCH}; 1 = one request per
                         report, to its own webhook)
  --tls-cert FILE        push over HTTPS: PEM certificate (with --tls-key)   RUNNER_TLS_CERT
  --tls-key FILE         push over HTTPS: PEM private key                    RUNNER_TLS_KEY
  -h, --help             print this help

A fleet on NATS JetStream (README, "Scaling runners"): many processes behind one registered runner.
  --mode MODE            single (default: a runner of its own), gateway      RUNNER_FLEET_MODE
                         (the registered runner: stores deliveries in
                         JetStream, relays the workers' reports), worker
                         (runs jobs from JetStream; needs no --url), or
                         combined (both in one process)
  --nats URL[,URL]       the NATS servers (nats://host:4222)                 RUNNER_NATS
  --capacity N           gateway: at most N jobs in the fleet at once        RUNNER_CAPACITY
                         (default: the live workers' slots)
  --ops-listen HOST:PORT worker (or a pulling gateway): where /health,       RUNNER_OPS_LISTEN
                         /ready, /metrics, /info and POST /admin/drain are
                         served (default 127.0.0.1:0, any free port, printed);
                         a pushed-to gateway serves them on --listen
  --ack-wait SECONDS     a job message not kept alive this long goes to      RUNNER_ACK_WAIT
                         another worker (default ${DEFAULT_FLEET_SETUP.ackWaitSeconds})
  --max-deliver N        starts alone of a job without a result (or          RUNNER_MAX_DELIVER
                         deliveries, when no live worker runs its type) before
                         it goes to the dead letters (default ${DEFAULT_FLEET_SETUP.maxDeliver})
  --max-ack-pending N    job messages out with workers at once (default ${DEFAULT_FLEET_SETUP.maxAckPending})   RUNNER_MAX_ACK_PENDING
  --replicas N           copies of each stream in a NATS cluster (default 1)  RUNNER_REPLICAS
  --max-age SECONDS      events and dead letters are kept this long          RUNNER_MAX_AGE
                         (default ${DEFAULT_FLEET_SETUP.maxAgeSeconds}, a week)
  --drain-timeout SECONDS a drain ends within this long in every mode; then   RUNNER_DRAIN_TIMEOUT
                         running jobs are stopped and report an error (default 600)
  In a fleet, --concurrency is a worker's slots; --key-file is the runner's key, and a worker's
  may hold only its public half ({"kty":"OKP","crv":"Ed25519","x":…}: it signs nothing, and
  checks /admin/drain with it).

Jobs:
  A job runs in a fresh working directory with its env_vars (flow env, job env, FLOW_ID, JOB_ID,
  JOB_ATTEMPT, FLOW_INPUTS and DEP_<JOB>_<KEY> from its dependencies), PATH and HOME, and
  RESULT_FILE. python runs as \`python3 -u script.py\`, sh as \`sh script.sh\`.
  Result: write lines key=value (or one JSON object) to $RESULT_FILE; they become the job's
  result map. Exit code 0 reports finished with that result; a non-zero exit code, a signal or
  the job's timeout (the whole process group is killed) reports error. stdout and stderr are
  streamed to the coordinator as the job's logs.

Signals: SIGTERM or SIGINT drains (no new work; running jobs finish and report; exit 0).
A second one stops at once (running jobs are killed and reported as errors).
`;

/** A mistake in the command line or environment; main prints it with a hint to --help. */
export class UsageError extends Error {
  override name = "UsageError";
}

/** The parsed command line: help, or options to start a runner with. */
export type Config = { help: true } | { help: false; options: RunnerOptions };

/** The command line's options, as node:util's parseArgs reads them. */
const OPTIONS = {
  url: { type: "string" },
  context: { type: "string" },
  runner: { type: "string" },
  "key-file": { type: "string" },
  listen: { type: "string" },
  pull: { type: "boolean" },
  concurrency: { type: "string" },
  "work-dir": { type: "string" },
  "script-types": { type: "string" },
  heartbeat: { type: "string" },
  "started-after": { type: "string" },
  "answer-within": { type: "string" },
  batch: { type: "string" },
  "tls-cert": { type: "string" },
  "tls-key": { type: "string" },
  mode: { type: "string" },
  nats: { type: "string" },
  capacity: { type: "string" },
  "ops-listen": { type: "string" },
  "ack-wait": { type: "string" },
  "max-deliver": { type: "string" },
  "max-ack-pending": { type: "string" },
  replicas: { type: "string" },
  "max-age": { type: "string" },
  "drain-timeout": { type: "string" },
  help: { type: "boolean", short: "h" },
} as const;

/** An option that takes a value (all but --pull and --help). */
type TextOption = {
  [K in keyof typeof OPTIONS]: (typeof OPTIONS)[K]["type"] extends "string" ? K : never;
}[keyof typeof OPTIONS];

/** The runner's process: a runner of its own (`single`), or a fleet's gateway, worker or both. */
type FleetMode = "single" | FleetOptions["mode"];

/**
 * Reads the runner's settings from argv, falling back to RUNNER_* environment variables, and
 * loads the key (and TLS) files. Every problem is a UsageError naming the option; they are
 * checked in the order the options are listed in --help, files read last.
 */
export async function readConfig(argv: string[], env: NodeJS.ProcessEnv, cwd: string): Promise<Config> {
  const settings = Settings.parse(argv, env, cwd);
  if (settings.help) return { help: true };
  const fleetMode = settings.text("mode", "RUNNER_FLEET_MODE") ?? "single";
  if (!["single", "gateway", "worker", "combined"].includes(fleetMode))
    throw new UsageError(`--mode must be single, gateway, worker or combined, not ${JSON.stringify(fleetMode)}`);
  const mode = fleetMode as FleetMode;
  const { keyFile, ...who } = readIdentity(settings, mode);
  const delivery = settings.pull ? "pull" : (settings.text(undefined, "RUNNER_MODE") ?? "push");
  if (delivery !== "push" && delivery !== "pull")
    throw new UsageError(`RUNNER_MODE must be push or pull, not ${JSON.stringify(delivery)}`);
  const jobs = readJobSettings(settings, delivery, mode);
  const options: RunnerOptions = {
    ...who,
    key: readKey(await readText(keyFile, "--key-file"), keyFile, mode === "worker"),
    mode: delivery,
    ...jobs,
  };
  const workDir = settings.text("work-dir", "RUNNER_WORK_DIR");
  if (workDir) options.workDir = settings.path(workDir);
  if (mode !== "single") options.fleet = readFleet(mode, settings);
  if (delivery === "push" && mode !== "worker") Object.assign(options, await readPushListening(settings));
  return { help: false, options };
}

/**
 * Where each setting comes from: its flag, else its RUNNER_* environment variable (blank counts
 * as unset); paths are the caller's, relative to the directory the command was typed in.
 */
class Settings {
  private constructor(
    private readonly flags: Partial<Record<keyof typeof OPTIONS, string | boolean>>,
    private readonly env: NodeJS.ProcessEnv,
    private readonly cwd: string,
  ) {}

  /** Parses argv strictly: an unknown option or a missing value is a UsageError. */
  static parse(argv: string[], env: NodeJS.ProcessEnv, cwd: string): Settings {
    try {
      const { values } = parseArgs({ args: argv, strict: true, allowPositionals: false, options: OPTIONS });
      return new Settings(values, env, cwd);
    } catch (error) {
      throw new UsageError((error as Error).message);
    }
  }

  get help(): boolean {
    return this.flags.help === true;
  }

  get pull(): boolean {
    return this.flags.pull === true;
  }

  /** The option's text (no flag: the environment's alone), or undefined when unset. */
  text(option: TextOption | undefined, name: string): string | undefined {
    const flag = option === undefined ? undefined : (this.flags[option] as string | undefined);
    return (flag ?? this.env[name])?.trim() || undefined;
  }

  /** The option's text; unset is a UsageError. */
  required(option: TextOption, name: string): string {
    const value = this.text(option, name);
    if (value === undefined) throw new UsageError(`--${option} (or ${name}) is required`);
    return value;
  }

  /** The option as a positive integer, else `fallback` (undefined: unset). */
  count(option: TextOption, name: string, fallback?: number): number | undefined {
    const text = this.text(option, name) ?? (fallback === undefined ? undefined : String(fallback));
    return text === undefined ? undefined : positive(text, `--${option}`);
  }

  path(given: string): string {
    return path.resolve(this.cwd, given);
  }
}

/** Who the runner is: the coordinator it reports to, its ids, and its key's file (read later). */
function readIdentity(settings: Settings, mode: FleetMode) {
  // A worker talks to NATS only.
  const url =
    mode === "worker"
      ? (settings.text("url", "RUNNER_URL") ?? "http://127.0.0.1/")
      : settings.required("url", "RUNNER_URL");
  if (!/^https?:\/\/[^/]/.test(url)) throw new UsageError(`--url must be an http(s) URL, not ${JSON.stringify(url)}`);
  return {
    url: url.replace(/\/+$/, ""),
    contextId: positive(settings.required("context", "RUNNER_CONTEXT"), "--context"),
    runnerId: positive(settings.required("runner", "RUNNER_ID"), "--runner"),
    keyFile: settings.path(settings.required("key-file", "RUNNER_KEY_FILE")),
  };
}

/** How jobs are run and reported: slots, heartbeats, `started`, answers, batches, script types. */
function readJobSettings(settings: Settings, delivery: "push" | "pull", mode: FleetMode) {
  const concurrency = settings.count("concurrency", "RUNNER_CONCURRENCY", 4) as number;
  const heartbeatSeconds = settings.count("heartbeat", "RUNNER_HEARTBEAT", 10) as number;
  const startedText = settings.text("started-after", "RUNNER_STARTED_AFTER") ?? String(DEFAULT_STARTED_AFTER_MS);
  // 0 is allowed: `started` at once.
  const startedAfterMs = startedText === "0" ? 0 : positive(startedText, "--started-after");
  // Past the heartbeat interval, heartbeats would come before `started`, and the coordinator
  // would start the job's own timeout that much late.
  if (startedAfterMs >= heartbeatSeconds * 1000)
    throw new UsageError(
      `--started-after must be below the heartbeat interval (${heartbeatSeconds * 1000} ms), not ${startedAfterMs}`,
    );
  const answerText = settings.text("answer-within", "RUNNER_ANSWER_WITHIN") ?? "0";
  const answerWithinMs = answerText === "0" ? 0 : positive(answerText, "--answer-within");
  if (answerWithinMs > MAX_ANSWER_WITHIN_MS)
    throw new UsageError(`--answer-within must be at most ${MAX_ANSWER_WITHIN_MS} ms, not ${answerWithinMs}`);
  if (answerWithinMs > 0 && (delivery !== "push" || mode !== "single"))
    throw new UsageError("--answer-within applies to a push runner of its own (not --pull, not a fleet)");
  const batch = settings.count("batch", "RUNNER_BATCH", DEFAULT_BATCH) as number;
  if (batch > 100) throw new UsageError(`--batch must be at most 100, not ${batch}`);
  const scriptTypes = (settings.text("script-types", "RUNNER_SCRIPT_TYPES") ?? "python,sh")
    .split(",")
    .map((t) => t.trim())
    .filter(Boolean);
  if (scriptTypes.length === 0) throw new UsageError("--script-types lists no script type");
  return {
    concurrency,
    heartbeatSeconds,
    startedAfterMs,
    ...(answerWithinMs > 0 ? { answerWithinMs } : {}),
    scriptTypes,
    batch,
  };
}

/** A push server's address, and its TLS files (both or neither). */
async function readPushListening(settings: Settings): Promise<Pick<RunnerOptions, "listen" | "tls">> {
  const listen = parseListen(settings.text("listen", "RUNNER_LISTEN") ?? "127.0.0.1:8090");
  const cert = settings.text("tls-cert", "RUNNER_TLS_CERT");
  const key = settings.text("tls-key", "RUNNER_TLS_KEY");
  if ((cert === undefined) !== (key === undefined)) throw new UsageError("--tls-cert and --tls-key go together");
  if (!cert || !key) return { listen };
  const tls = {
    cert: Buffer.from(await readText(settings.path(cert), "--tls-cert")),
    key: Buffer.from(await readText(settings.path(key), "--tls-key")),
  };
  return { listen, tls };
}

/** The fleet's options (`--mode` gateway, worker or combined). */
function readFleet(mode: FleetOptions["mode"], settings: Settings): FleetOptions {
  const servers = settings
    .required("nats", "RUNNER_NATS")
    .split(",")
    .map((s) => s.trim())
    .filter(Boolean);
  for (const server of servers)
    if (!/^(nats|tls|wss?):\/\/[^/]+$/.test(server) && !/^[^/:]+:\d+$/.test(server))
      throw new UsageError(`--nats must be nats://host:port (comma-separated), not ${JSON.stringify(server)}`);
  const setup = {
    ...optional("ackWaitSeconds", settings.count("ack-wait", "RUNNER_ACK_WAIT")),
    ...optional("maxDeliver", settings.count("max-deliver", "RUNNER_MAX_DELIVER")),
    ...optional("maxAckPending", settings.count("max-ack-pending", "RUNNER_MAX_ACK_PENDING")),
    ...optional("replicas", settings.count("replicas", "RUNNER_REPLICAS")),
    ...optional("maxAgeSeconds", settings.count("max-age", "RUNNER_MAX_AGE")),
  };
  if ((setup.maxAgeSeconds ?? DEFAULT_FLEET_SETUP.maxAgeSeconds) < 120)
    throw new UsageError("--max-age must be at least 120 seconds (the events' dedupe window)");
  const capacity = settings.count("capacity", "RUNNER_CAPACITY");
  const drainTimeout = settings.count("drain-timeout", "RUNNER_DRAIN_TIMEOUT");
  const ops = settings.text("ops-listen", "RUNNER_OPS_LISTEN");
  return {
    mode,
    servers,
    setup,
    ...(capacity === undefined ? {} : { capacity }),
    ...(drainTimeout === undefined ? {} : { drainTimeoutMs: drainTimeout * 1000 }),
    ...(ops === undefined ? {} : { opsListen: parseListen(ops) }),
  };
}

function optional<K extends string>(key: K, value: number | undefined): { [P in K]?: number } {
  return (value === undefined ? {} : { [key]: value }) as { [P in K]?: number };
}

/**
 * The runner's key: private, since it signs its reports; a fleet's worker signs nothing and
 * checks drains with the public half, so its file may hold only that (a worker machine that
 * holds no private key cannot report as the runner).
 */
function readKey(text: string, file: string, publicOk: boolean): RunnerOptions["key"] {
  if (publicOk) {
    try {
      const parsed = PublicJwk.safeParse(JSON.parse(text));
      if (parsed.success && !("d" in (JSON.parse(text) as object))) return parsed.data;
    } catch {
      // Not JSON: parsePrivateJwk says so below.
    }
  }
  return parsePrivateJwk(text, file);
}

function positive(text: string, option: string): number {
  const n = Number(text);
  if (!/^\d+$/.test(text) || !Number.isSafeInteger(n) || n < 1)
    throw new UsageError(`${option} must be a positive integer, not ${JSON.stringify(text)}`);
  return n;
}

/** `host:port`, `:port`, `[::1]:port` or a bare port. */
export function parseListen(text: string): { host: string; port: number } {
  const match = /^(?:\[([^\]]+)\]|([^:]*)):(\d+)$/.exec(text) ?? /^()()(\d+)$/.exec(text);
  const port = Number(match?.[3]);
  if (!match || port > 65535) throw new UsageError(`--listen must be HOST:PORT, not ${JSON.stringify(text)}`);
  return { host: match[1] || match[2] || "127.0.0.1", port };
}

async function readText(file: string, option: string): Promise<string> {
  try {
    return await readFile(file, "utf8");
  } catch (error) {
    throw new UsageError(
      `${option}: cannot read ${file}: ${(error as NodeJS.ErrnoException).code ?? (error as Error).message}`,
    );
  }
}
