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

A fleet on NATS JetStream (docs/runners.md, "Scaling runners"): many processes behind one registered runner.
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
  result map. A JSON list of jobs written to $JOBS_FILE is added to the job's flow with it
  (docs/runners.md, "Adding jobs"). Exit code 0 reports finished with that result; a non-zero exit code, a signal or
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

/** The command line's options (each also read from its RUNNER_* variable, see USAGE). */
const ARGS = {
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

/**
 * Reads the runner's settings from argv, falling back to RUNNER_* environment variables, and
 * loads the key (and TLS) files. Every problem is a UsageError naming the option.
 */
export async function readConfig(argv: string[], env: NodeJS.ProcessEnv, cwd: string): Promise<Config> {
  let values;
  try {
    ({ values } = parseArgs({
      args: argv,
      strict: true,
      allowPositionals: false,
      options: ARGS,
    }));
  } catch (error) {
    throw new UsageError((error as Error).message);
  }
  if (values.help) return { help: true };

  const pick = (flag: string | undefined, name: string) => (flag ?? env[name])?.trim() || undefined;
  const need = (value: string | undefined, option: string, name: string): string => {
    if (value === undefined) throw new UsageError(`--${option} (or ${name}) is required`);
    return value;
  };
  const fleetMode = pick(values.mode, "RUNNER_FLEET_MODE") ?? "single";
  if (!["single", "gateway", "worker", "combined"].includes(fleetMode))
    throw new UsageError(`--mode must be single, gateway, worker or combined, not ${JSON.stringify(fleetMode)}`);
  // A worker talks to NATS only.
  const url =
    fleetMode === "worker"
      ? (pick(values.url, "RUNNER_URL") ?? "http://127.0.0.1/")
      : need(pick(values.url, "RUNNER_URL"), "url", "RUNNER_URL");
  if (!/^https?:\/\/[^/]/.test(url)) throw new UsageError(`--url must be an http(s) URL, not ${JSON.stringify(url)}`);
  const contextId = positive(need(pick(values.context, "RUNNER_CONTEXT"), "context", "RUNNER_CONTEXT"), "--context");
  const runnerId = positive(need(pick(values.runner, "RUNNER_ID"), "runner", "RUNNER_ID"), "--runner");
  // Paths are the caller's: relative to the directory the command was typed in.
  const file = (given: string) => path.resolve(cwd, given);
  const keyFile = file(need(pick(values["key-file"], "RUNNER_KEY_FILE"), "key-file", "RUNNER_KEY_FILE"));

  const modeText = values.pull ? "pull" : (pick(undefined, "RUNNER_MODE") ?? "push");
  if (modeText !== "push" && modeText !== "pull")
    throw new UsageError(`RUNNER_MODE must be push or pull, not ${JSON.stringify(modeText)}`);
  const concurrency = positive(pick(values.concurrency, "RUNNER_CONCURRENCY") ?? "4", "--concurrency");
  const { heartbeatSeconds, startedAfterMs, answerWithinMs } = readPacing(values, pick);
  if (answerWithinMs > 0 && (modeText !== "push" || fleetMode !== "single"))
    throw new UsageError("--answer-within applies to a push runner of its own (not --pull, not a fleet)");
  const batch = positive(pick(values.batch, "RUNNER_BATCH") ?? String(DEFAULT_BATCH), "--batch");
  if (batch > 100) throw new UsageError(`--batch must be at most 100, not ${batch}`);
  const scriptTypes = (pick(values["script-types"], "RUNNER_SCRIPT_TYPES") ?? "python,sh")
    .split(",")
    .map((t) => t.trim())
    .filter(Boolean);
  if (scriptTypes.length === 0) throw new UsageError("--script-types lists no script type");

  const options: RunnerOptions = {
    url: url.replace(/\/+$/, ""),
    contextId,
    runnerId,
    key: readKey(await readText(keyFile, "--key-file"), keyFile, fleetMode === "worker"),
    mode: modeText,
    concurrency,
    heartbeatSeconds,
    startedAfterMs,
    ...(answerWithinMs > 0 ? { answerWithinMs } : {}),
    scriptTypes,
    batch,
  };
  const workDir = pick(values["work-dir"], "RUNNER_WORK_DIR");
  if (workDir) options.workDir = file(workDir);
  if (fleetMode !== "single") {
    options.fleet = readFleet(fleetMode as FleetOptions["mode"], values, pick, need);
  }
  if (modeText === "push" && fleetMode !== "worker")
    Object.assign(options, await readPushListening(values, pick, file));
  return { help: false, options };
}

/** How a flag or its RUNNER_* variable is read (the flag wins; blank is unset). */
type PickOption = (flag: string | undefined, name: string) => string | undefined;
type Values = Record<string, string | boolean | undefined>;

/** A string option's value as parsed (undefined when not given). */
function text(values: Values, name: string): string | undefined {
  return values[name] as string | undefined;
}

/** When the runner tells the coordinator it is alive: heartbeats, `started`, and answering with the result. */
function readPacing(
  values: Values,
  pick: PickOption,
): { heartbeatSeconds: number; startedAfterMs: number; answerWithinMs: number } {
  const heartbeatSeconds = positive(pick(text(values, "heartbeat"), "RUNNER_HEARTBEAT") ?? "10", "--heartbeat");
  const startedText = pick(text(values, "started-after"), "RUNNER_STARTED_AFTER") ?? String(DEFAULT_STARTED_AFTER_MS);
  // 0 is allowed: `started` at once.
  const startedAfterMs = startedText === "0" ? 0 : positive(startedText, "--started-after");
  // Past the heartbeat interval, heartbeats would come before `started`, and the coordinator
  // would start the job's own timeout that much late.
  if (startedAfterMs >= heartbeatSeconds * 1000)
    throw new UsageError(
      `--started-after must be below the heartbeat interval (${heartbeatSeconds * 1000} ms), not ${startedAfterMs}`,
    );
  const answerText = pick(text(values, "answer-within"), "RUNNER_ANSWER_WITHIN") ?? "0";
  const answerWithinMs = answerText === "0" ? 0 : positive(answerText, "--answer-within");
  if (answerWithinMs > MAX_ANSWER_WITHIN_MS)
    throw new UsageError(`--answer-within must be at most ${MAX_ANSWER_WITHIN_MS} ms, not ${answerWithinMs}`);
  return { heartbeatSeconds, startedAfterMs, answerWithinMs };
}

/** A push runner's address, and its TLS certificate and key when it serves HTTPS. */
async function readPushListening(
  values: Values,
  pick: PickOption,
  file: (given: string) => string,
): Promise<Pick<RunnerOptions, "listen" | "tls">> {
  const options: Pick<RunnerOptions, "listen" | "tls"> = {};
  options.listen = parseListen(pick(text(values, "listen"), "RUNNER_LISTEN") ?? "127.0.0.1:8090");
  const cert = pick(text(values, "tls-cert"), "RUNNER_TLS_CERT");
  const key = pick(text(values, "tls-key"), "RUNNER_TLS_KEY");
  if ((cert === undefined) !== (key === undefined)) throw new UsageError("--tls-cert and --tls-key go together");
  if (cert && key)
    options.tls = {
      cert: Buffer.from(await readText(file(cert), "--tls-cert")),
      key: Buffer.from(await readText(file(key), "--tls-key")),
    };
  return options;
}

/** The fleet's options (`--mode` gateway, worker or combined). */
function readFleet(
  mode: FleetOptions["mode"],
  values: Values,
  pick: PickOption,
  need: (value: string | undefined, option: string, name: string) => string,
): FleetOptions {
  const flag = (name: string) => text(values, name);
  const servers = need(pick(flag("nats"), "RUNNER_NATS"), "nats", "RUNNER_NATS")
    .split(",")
    .map((s) => s.trim())
    .filter(Boolean);
  for (const server of servers)
    if (!/^(nats|tls|wss?):\/\/[^/]+$/.test(server) && !/^[^/:]+:\d+$/.test(server))
      throw new UsageError(`--nats must be nats://host:port (comma-separated), not ${JSON.stringify(server)}`);
  const number = (option: string, env: string): number | undefined => {
    const text = pick(flag(option), env);
    return text === undefined ? undefined : positive(text, `--${option}`);
  };
  const setup = {
    ...optional("ackWaitSeconds", number("ack-wait", "RUNNER_ACK_WAIT")),
    ...optional("maxDeliver", number("max-deliver", "RUNNER_MAX_DELIVER")),
    ...optional("maxAckPending", number("max-ack-pending", "RUNNER_MAX_ACK_PENDING")),
    ...optional("replicas", number("replicas", "RUNNER_REPLICAS")),
    ...optional("maxAgeSeconds", number("max-age", "RUNNER_MAX_AGE")),
  };
  if ((setup.maxAgeSeconds ?? DEFAULT_FLEET_SETUP.maxAgeSeconds) < 120)
    throw new UsageError("--max-age must be at least 120 seconds (the events' dedupe window)");
  const capacity = number("capacity", "RUNNER_CAPACITY");
  const drainTimeout = number("drain-timeout", "RUNNER_DRAIN_TIMEOUT");
  const ops = pick(flag("ops-listen"), "RUNNER_OPS_LISTEN");
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
