import { spawn } from "node:child_process";
import { existsSync } from "node:fs";
import { constants } from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { ApiError } from "../../shared/client/index.js";
import type { Runner } from "../../shared/model/index.js";
import { contextAndId, parseCount, type Command, type Invocation } from "../command.js";
import { requireUrl, resolveConfig } from "../config.js";
import { ConfigError, UsageError } from "../errors.js";
import { readPrivateKey } from "../keyfile.js";
import { shortKey } from "../output.js";
import { actorSession } from "../session.js";

const NAME = "runner start";

/** The repository this CLI runs from: the reference runner is its `runner/main.ts`. */
const ROOT = checkoutOf(path.dirname(fileURLToPath(import.meta.url)));

/** The project's checkout this module runs from: the nearest folder up with runner/main.ts (the sources, or a bundle of the CLI inside the checkout). */
function checkoutOf(from: string): string {
  for (let at = from; ; at = path.dirname(at)) {
    if (existsSync(path.join(at, "runner", "main.ts"))) return at;
    if (path.dirname(at) === at) return path.resolve(from, "..", "..");
  }
}

/** Signals passed on to the runner: Ctrl-C and a service manager's stop, and a closed terminal. */
const FORWARDED: NodeJS.Signals[] = ["SIGINT", "SIGTERM", "SIGHUP"];

const start: Command = {
  name: NAME,
  summary: "run the reference runner (python, sh) as a registered runner, in the foreground",
  usage:
    "runner start <context> <runner> --key-file <runner key> [--pull] [--listen <host:port>] [--concurrency <n>] [--batch <n>] [--answer-within <ms>] [--work-dir <dir>] [--mode gateway|worker|combined --nats <url> [--drain-timeout <seconds>]]",
  args: ["context", "runner"],
  options: {
    "key-file": { type: "string", value: "<file>", help: "the runner's private key (the one it was registered with)" },
    pull: { type: "boolean", help: "lease jobs from the context's queues instead of taking pushed deliveries" },
    listen: {
      type: "string",
      value: "<host:port>",
      help: "push: where to listen (default 127.0.0.1:8090; the address it was registered with)",
    },
    concurrency: { type: "string", value: "<n>", help: "jobs at once (default: the registered concurrency)" },
    batch: {
      type: "string",
      value: "<n>",
      help: "jobs per lease (--pull) and reports per signed request, 1 to 100 (default 32; 1: one request per report)",
    },
    "answer-within": {
      type: "string",
      value: "<ms>",
      help: "push: answer a delivery with the job's result when it ends within <ms> (default 0: at once)",
    },
    "work-dir": {
      type: "string",
      value: "<dir>",
      help: "where each job gets a fresh working directory (default <tmp>/flow-runner)",
    },
    mode: {
      type: "string",
      value: "<mode>",
      help: "a fleet on NATS JetStream: gateway (the registered runner), worker (runs jobs), or combined (both)",
    },
    nats: { type: "string", value: "<url>", help: "with --mode: the NATS servers, nats://host:4222 (comma-separated)" },
    capacity: { type: "string", value: "<n>", help: "gateway: at most n jobs in the fleet at once" },
    "ops-listen": {
      type: "string",
      value: "<host:port>",
      help: "worker: where /health, /ready, /metrics, /info and /admin/drain are served (default any free port)",
    },
    "drain-timeout": {
      type: "string",
      value: "<seconds>",
      help: "with --mode: a drain ends within this long; then running jobs are stopped and report an error (default 600)",
    },
  },
  details: [
    "Starts runner/main.ts of this checkout with the coordinator URL of your profile (or --url /",
    "FLOWC_URL) and stays in the foreground with its output. Ctrl-C (or SIGTERM) drains it: running",
    "jobs finish and report, then it exits; a second Ctrl-C stops at once. Exits with the runner's code.",
    "First, if your profile may read the context's runners, it checks that <runner> is registered with",
    "this key (runner ids count per context) and that its address matches --listen.",
    "Here --key-file names the runner's key, not yours. npm run -s runner -- --help lists the runner's own options.",
    "With --mode, it is part of a fleet behind the registered runner (docs/runners.md, Scaling runners): the gateway",
    "takes the deliveries (at --listen, or --pull) into JetStream, workers on any machine run them; every",
    "member gets the runner's --key-file; a worker's may hold only the public key (it signs nothing).",
  ].join("\n"),
  examples: [
    "flowc runner register 1 --key-file runner.json --type python --script-types python,sh --address http://127.0.0.1:8090/",
    "flowc runner start 1 2 --key-file runner.json --listen 127.0.0.1:8090",
    "flowc runner start 1 3 --key-file runner.json --pull --concurrency 2",
    "flowc runner start 1 2 --key-file runner.json --mode gateway --nats nats://127.0.0.1:4222 --listen 127.0.0.1:8090",
    "flowc runner start 1 2 --key-file runner.json --mode worker --nats nats://127.0.0.1:4222 --concurrency 8",
  ],
  async run(invocation) {
    const { options, cwd, out } = invocation;
    const { contextId, id: runnerId } = contextAndId(invocation, "<runner>", NAME);
    const keyOption = options.string("key-file");
    if (keyOption === undefined) throw new UsageError("missing option --key-file <runner key>", NAME);
    const keyFile = path.resolve(cwd, keyOption);
    // Checked here so a wrong path is flowc's one line, not the runner's. A worker's file may
    // hold the public half alone (it signs nothing): the runner reads that one.
    const mode = options.string("mode");
    const pubkey = mode === "worker" ? "" : readPrivateKey(keyFile, "--key-file").x;
    const url = requireUrl(resolveConfig(invocation.globals, invocation.env, cwd, NAME));

    const args = ["--url", url, "--context", String(contextId), "--runner", String(runnerId), "--key-file", keyFile];
    if (options.flag("pull")) args.push("--pull");
    const listen = options.string("listen");
    if (listen !== undefined) {
      if (options.flag("pull")) throw new UsageError("--listen is for push mode; --pull listens nowhere", NAME);
      args.push("--listen", listen);
    }
    const concurrency = options.string("concurrency");
    const given = concurrency !== undefined ? parseCount(concurrency, "--concurrency", NAME, 1) : undefined;
    const batch = options.string("batch");
    if (batch !== undefined) args.push("--batch", String(parseCount(batch, "--batch", NAME, 1)));
    // The runner checks its range and that it runs alone in push mode (its usage error is passed on).
    const answerWithin = options.string("answer-within");
    if (answerWithin !== undefined) args.push("--answer-within", answerWithin);
    const workDir = options.string("work-dir");
    if (workDir !== undefined) args.push("--work-dir", path.resolve(cwd, workDir));
    const nats = options.string("nats");
    if (mode !== undefined) {
      if (!["gateway", "worker", "combined"].includes(mode))
        throw new UsageError(`--mode must be gateway, worker or combined, not ${JSON.stringify(mode)}`, NAME);
      if (nats === undefined) throw new UsageError(`--mode ${mode} needs --nats <url>`, NAME);
      if (mode === "worker" && (listen !== undefined || options.flag("pull")))
        throw new UsageError("a worker takes its jobs from NATS: --listen and --pull are for the gateway", NAME);
      args.push("--mode", mode, "--nats", nats);
    } else {
      for (const fleetOnly of ["nats", "capacity", "ops-listen", "drain-timeout"])
        if (options.string(fleetOnly) !== undefined)
          throw new UsageError(`--${fleetOnly} goes with --mode gateway, worker or combined`, NAME);
    }
    const capacity = options.string("capacity");
    if (capacity !== undefined) args.push("--capacity", String(parseCount(capacity, "--capacity", NAME, 1)));
    const opsListen = options.string("ops-listen");
    if (opsListen !== undefined) args.push("--ops-listen", opsListen);
    const drainTimeout = options.string("drain-timeout");
    if (drainTimeout !== undefined)
      args.push("--drain-timeout", String(parseCount(drainTimeout, "--drain-timeout", NAME, 1)));

    // A worker is no runner of its own: the gateway stands for the registration.
    const registered =
      mode !== "worker"
        ? await checkRegistration(invocation, {
            contextId,
            runnerId,
            pubkey,
            keyFile,
            listen,
            pull: options.flag("pull"),
          })
        : undefined;
    args.push(...registeredSettings(invocation, registered, given));

    const entry = path.join(ROOT, "runner", "main.ts");
    if (!existsSync(entry))
      throw new ConfigError(
        `the reference runner is not at ${entry}: flowc runner start works from the project's checkout`,
      );
    out.note(`starting the reference runner ${runnerId} of context ${contextId} against ${url} (Ctrl-C drains it)`);
    return runForeground(process.execPath, ["--import", "tsx", entry, ...args], ROOT, invocation.env);
  },
};

/** The script types the reference runner can run. */
const RUNS: readonly string[] = ["python", "sh"];

/**
 * The settings the registration decides: the concurrency the coordinator holds it to (unless
 * `--concurrency` says otherwise, which is then said loudly: the coordinator never sends more
 * than the registered number at once, and a runner that takes fewer holds the others back), and
 * the script types it was registered for, of those the reference runner can run.
 */
function registeredSettings(invocation: Invocation, runner: Runner | undefined, given: number | undefined): string[] {
  const args: string[] = [];
  const concurrency = given ?? runner?.concurrency;
  if (concurrency !== undefined) args.push("--concurrency", String(concurrency));
  if (runner && given !== undefined && given !== runner.concurrency)
    invocation.out.note(
      `WARNING: --concurrency ${given}, but runner ${runner.id} is registered with concurrency ${runner.concurrency}: the coordinator sends it at most ${runner.concurrency} jobs at once (the registration changes with PATCH /v1/contexts/${runner.context_id}/runners/${runner.id} {"concurrency": ${given}}: flowc has no runner update)`,
    );
  if (!runner) return args;
  const types = runner.script_types.filter((t) => RUNS.includes(t));
  const others = runner.script_types.filter((t) => !RUNS.includes(t));
  if (others.length > 0)
    invocation.out.note(
      `runner ${runner.id} is registered for ${others.join(", ")} too, which the reference runner does not run: such jobs sent to it fail`,
    );
  if (types.length > 0) args.push("--script-types", types.join(","));
  return args;
}

/**
 * Catches the mistakes that otherwise look like a runner that never gets work: an id that is
 * not registered, or registered with another key (runner ids count per context), and a listen
 * port or mode that does not match the registration. Needs an actor who may read the context's
 * runners; without one (or when the coordinator does not answer) the runner is started unchecked.
 */
async function checkRegistration(
  invocation: Invocation,
  expected: {
    contextId: number;
    runnerId: number;
    pubkey: string;
    keyFile: string;
    listen: string | undefined;
    pull: boolean;
  },
): Promise<Runner | undefined> {
  const { contextId, runnerId, pubkey, keyFile } = expected;
  let runner;
  try {
    runner = await (await actorSession(invocation, NAME)).client.loadRunner(contextId, runnerId);
  } catch (error) {
    if (error instanceof ApiError && error.status === 404) {
      throw new ConfigError(
        `runner ${runnerId} is not registered in context ${contextId} (flowc runner list ${contextId} shows its runners)`,
      );
    }
    return undefined;
  }
  if (runner.pubkey !== pubkey) {
    throw new ConfigError(
      `runner ${runnerId} of context ${contextId} is registered with key ${shortKey(runner.pubkey)}, but ${keyFile} holds ${shortKey(pubkey)}: is <runner> its id in this context?`,
    );
  }
  const out = invocation.out;
  if (expected.pull && !runner.local)
    out.note(`runner ${runnerId} is registered for push (${runner.address}), not pull: it will get no jobs by pulling`);
  if (!expected.pull && runner.address === "")
    out.note(`runner ${runnerId} is registered without an address: pass --pull, or nothing will be pushed to it`);
  // Only for a local address: a public one may well sit behind a proxy on another port.
  const port = expected.listen?.split(":").pop() ?? "8090";
  const address = runner.address === "" ? undefined : new URL(runner.address);
  if (
    !expected.pull &&
    address &&
    ["127.0.0.1", "localhost", "[::1]"].includes(address.hostname) &&
    (address.port || "80") !== port
  ) {
    out.note(`runner ${runnerId} is registered with address ${runner.address}, but listens on port ${port}`);
  }
  return runner;
}

/**
 * Runs the runner as a child with our stdout and stderr and resolves with its exit code (128 +
 * the signal's number if a signal ended it). It gets its own process group, so a terminal's
 * Ctrl-C reaches it once, through us: the runner takes a second signal as "stop at once, kill
 * the running jobs", which a signal from both the terminal and us would trigger by accident.
 */
function runForeground(command: string, args: string[], cwd: string, env: NodeJS.ProcessEnv): Promise<number> {
  return new Promise((resolve, reject) => {
    // RUNNER_* variables would be read by the runner as settings this command did not ask for.
    const childEnv = Object.fromEntries(Object.entries(env).filter(([name]) => !name.startsWith("RUNNER_")));
    // cwd is the repository, where `--import tsx` resolves.
    const child = spawn(command, args, { cwd, env: childEnv, stdio: ["ignore", "inherit", "inherit"], detached: true });
    const forward = (signal: NodeJS.Signals) => child.kill(signal);
    for (const signal of FORWARDED) process.on(signal, forward);
    // Whatever ends this process otherwise must not leave the runner behind.
    const orphan = () => child.kill("SIGTERM");
    process.once("exit", orphan);
    const cleanup = () => {
      for (const signal of FORWARDED) process.off(signal, forward);
      process.off("exit", orphan);
    };
    child.once("error", (error) => {
      cleanup();
      reject(new Error(`cannot start the runner: ${error.message}`));
    });
    child.once("exit", (code, signal) => {
      cleanup();
      resolve(code ?? 128 + (signal ? (constants.signals[signal] ?? 0) : 0));
    });
  });
}

/** `runner start`: the reference runner in the foreground. */
export const runnerStartCommands: Command[] = [start];
