import { spawn, type ChildProcess } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { createRequire } from "node:module";
import path from "node:path";
import { memoryBackedDir } from "./memory-dir.js";

/** A `wrangler dev` child process. */
export interface WranglerDev {
  url: string;
  child: ChildProcess;
  stop(): Promise<void>;
}

export interface WranglerDevOptions {
  port: number;
  /** A dotenv file with the Worker's secrets (storage URL and token). */
  envFile: string;
  /** Extra `--var NAME:value` bindings. */
  vars?: Record<string, string>;
  cwd: string;
  /** Called with each line wrangler prints. */
  onLine?: (line: string) => void;
  readyTimeoutMs?: number;
  /**
   * Where workerd keeps Durable Object storage. By default a fresh temporary folder, in memory
   * where the machine allows (`memoryBackedDir`), removed on stop, so parallel instances never
   * share state.
   */
  persistTo?: string;
  /**
   * Profiling: the port of the Worker's inspector (a free one by default) and the script as
   * written, not minified, so a CPU profile names its functions (`npm run bench -- --profile`).
   */
  inspect?: { port: number };
}

/** Wrangler refuses Node older than this; npm scripts run the project's own Node 22. */
const MIN_NODE_MAJOR = 22;

/**
 * The process groups of the wrangler dev instances still running. A group outlives this process
 * (it is detached, so that stopping it can signal workerd too): should this process exit without
 * stopping one (an uncaught error, `process.exit`), the group is killed on the way out. A SIGKILL
 * of this process still leaves it running.
 */
const running = new Set<number>();
let watching = false;

function killOnExit(group: number): void {
  running.add(group);
  if (watching) return;
  watching = true;
  process.once("exit", () => {
    for (const pid of running) {
      try {
        process.kill(-pid, "SIGKILL");
      } catch {
        // already gone
      }
    }
  });
}

/**
 * Whether `wrangler dev` keeps its local trace store (for its local explorer): off. Wrangler
 * writes a trace of every invocation into a SQLite database of its own, committed on the Worker's
 * thread, which is also the thread of every Durable Object: measured over 40 lone jobs, a
 * delivery waited behind two of those commits on its way to the runner, and submit → start took
 * 23 to 25 ms with it against 20 to 21 without, a 10-job chain 158 to 166 ms against 122 to 129.
 * A deployed Worker has no such store on its path. `X_LOCAL_OBSERVABILITY=true` turns it back on.
 */
const LOCAL_OBSERVABILITY = "false";

/**
 * Starts `wrangler dev --test-scheduled` on 127.0.0.1 and resolves once the Worker answers.
 * Runs wrangler with this process's Node, and keeps it off Cloudflare's network (no `Request.cf`
 * download, no telemetry), so it works offline. Wrangler's local trace store is off unless
 * `X_LOCAL_OBSERVABILITY` says otherwise (see LOCAL_OBSERVABILITY).
 */
export async function startWranglerDev(options: WranglerDevOptions): Promise<WranglerDev> {
  checkNode();
  const persistTo = options.persistTo ?? mkdtempSync(path.join(memoryBackedDir(), "wrangler-state-"));
  const child = spawn(process.execPath, wranglerArgs(options, persistTo), {
    cwd: options.cwd,
    env: {
      ...process.env,
      CLOUDFLARE_CF_FETCH_ENABLED: "false",
      WRANGLER_SEND_METRICS: "false",
      NO_COLOR: "1",
      X_LOCAL_OBSERVABILITY: process.env.X_LOCAL_OBSERVABILITY || LOCAL_OBSERVABILITY,
    },
    stdio: ["ignore", "pipe", "pipe"],
    detached: true,
  });
  let tail = "";
  const onData = (chunk: Buffer) => {
    const text = chunk.toString();
    tail = (tail + text).slice(-4000);
    for (const line of text.split("\n")) if (line.trim()) options.onLine?.(line);
  };
  child.stdout?.on("data", onData);
  child.stderr?.on("data", onData);
  const exited = new Promise<void>((resolve) => child.once("exit", () => resolve()));
  const group = child.pid as number;
  killOnExit(group);
  void exited.then(() => running.delete(group));
  const stop = async () => {
    await stopGroup(child, exited);
    if (!options.persistTo) rmSync(persistTo, { recursive: true, force: true });
  };
  const url = `http://127.0.0.1:${options.port}`;
  await answering(url, child, stop, Date.now() + (options.readyTimeoutMs ?? 60_000), () => tail);
  return { url, child, stop };
}

/** wrangler needs a newer Node than the project: say how to get it rather than fail obscurely. */
function checkNode(): void {
  const major = Number(process.versions.node.split(".")[0]);
  if (major >= MIN_NODE_MAJOR) return;
  throw new Error(
    `wrangler needs Node ${MIN_NODE_MAJOR}+ and this is Node ${process.versions.node}; ` +
      "run through npm (`npm run dev`), which uses the project's own Node from node_modules",
  );
}

/** `wrangler dev`'s command line: the Worker on the port, its env file, storage, vars and inspector. */
function wranglerArgs(options: WranglerDevOptions, persistTo: string): string[] {
  const wranglerBin = path.join(
    path.dirname(createRequire(import.meta.url).resolve("wrangler/package.json")),
    "bin",
    "wrangler.js",
  );
  return [
    wranglerBin,
    "dev",
    "--ip",
    "127.0.0.1",
    "--port",
    String(options.port),
    "--env-file",
    options.envFile,
    "--test-scheduled",
    "--show-interactive-dev-session=false",
    "--inspector-port",
    String(options.inspect?.port ?? 0),
    ...(options.inspect ? ["--minify=false"] : []),
    "--persist-to",
    persistTo,
    ...Object.entries(options.vars ?? {}).flatMap(([name, value]) => ["--var", `${name}:${value}`]),
  ];
}

/** Stops wrangler and the workerd it runs as its own child: the whole group, SIGKILL after 5 s. */
async function stopGroup(child: ChildProcess, exited: Promise<void>): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return;
  const signal = (name: NodeJS.Signals) => {
    try {
      process.kill(-(child.pid as number), name);
    } catch {
      if (name === "SIGTERM") child.kill("SIGTERM"); // no group: the process alone
    }
  };
  signal("SIGTERM");
  const timer = setTimeout(() => signal("SIGKILL"), 5_000);
  await exited;
  clearTimeout(timer);
}

/** Waits for the Worker to answer /health; throws (after stopping it) when it exits or takes too long. */
async function answering(
  url: string,
  child: ChildProcess,
  stop: () => Promise<void>,
  deadline: number,
  tail: () => string,
): Promise<void> {
  for (;;) {
    if (child.exitCode !== null) throw new Error(`wrangler dev exited (code ${child.exitCode}):\n${tail()}`);
    if (Date.now() > deadline) {
      await stop();
      throw new Error(`wrangler dev did not answer on ${url} in time:\n${tail()}`);
    }
    try {
      await fetch(`${url}/health`, { signal: AbortSignal.timeout(2_000) });
      return;
    } catch {
      await new Promise((r) => setTimeout(r, 200));
    }
  }
}
