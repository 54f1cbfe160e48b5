import { spawn, type ChildProcess } from "node:child_process";
import { existsSync, mkdirSync, writeFileSync } from "node:fs";
import { createRequire } from "node:module";
import path from "node:path";
import { fireCrons, type CronFirer } from "../cron.js";
import { freePort } from "../redis-server.js";
import { buildBundle } from "./bundle.js";
import { readDeploySettings } from "./deploy-config.js";
import { lockDataDir } from "./data-lock.js";
import { pruneEmptyObjects } from "./storage.js";
import { renderWorkerdConfig } from "./workerd-config.js";

/** How to run a Worker with `startServe`. */
export interface ServeOptions {
  /** The wrangler.toml of the Worker (the project's own for the coordinator). */
  configPath: string;
  /** The data folder: Durable Object storage, the bundle, the generated config, the lock. */
  data: string;
  /** Where the public socket listens: `host:port` (default 127.0.0.1:8787). */
  listen?: string;
  /** The control socket's port on 127.0.0.1 (default: a free one). */
  controlPort?: number;
  /** Vars set or overridden on top of `[vars]`. */
  vars?: Record<string, string>;
  /** The secrets (read by secrets.ts), handed to workerd in its environment only. */
  secrets: Record<string, string>;
  /** Build the bundle first (default); false runs the bundle the data folder already holds. */
  build?: boolean;
  /** What the Worker may reach with fetch() (default: public, private and local addresses). */
  network?: string[];
  /** Fire the cron triggers on their schedule (default true). */
  cron?: boolean;
  /** Each line workerd prints; by default they go to this process's stdout and stderr. */
  onLine?: (line: string) => void;
  /** One line per step. */
  log?: (line: string) => void;
  readyTimeoutMs?: number;
}

/** A Worker served by workerd: its URLs, the process, and how to stop both it and the cron firer. */
export interface Served {
  /** The public socket (a wildcard address is reached through 127.0.0.1). */
  url: string;
  /** The control socket: `GET ${controlUrl}/__scheduled?cron=…` runs the scheduled handler once. */
  controlUrl: string;
  crons: string[];
  child: ChildProcess;
  stop(): Promise<void>;
}

/** Where the data folder keeps what (docs/deploy.md, "What it keeps on disk"). */
export const DATA_LAYOUT = {
  storage: "durable-objects",
  bundle: "bundle",
  config: "workerd.capnp",
} as const;

/** The default network: everything a self-hosted stack may sit on (its Redis endpoint, its runners). */
export const DEFAULT_NETWORK = ["public", "private", "local"];

/**
 * Runs a Worker as `wrangler deploy` would deploy it, on plain workerd: builds the bundle (unless
 * told not to), writes the workerd config, starts `workerd serve` with the secrets in its
 * environment, waits until it answers, and fires the cron triggers through the control socket.
 * The data folder is locked for as long as it runs: two processes never share one storage.
 */
export async function startServe(options: ServeOptions): Promise<Served> {
  const log = options.log ?? (() => {});
  const settings = readDeploySettings(options.configPath);
  const data = path.resolve(options.data);
  mkdirSync(path.join(data, DATA_LAYOUT.storage), { recursive: true });
  const lock = lockDataDir(data);
  try {
    const stored = pruneEmptyObjects(path.join(data, DATA_LAYOUT.storage));
    const objects = Object.values(stored.objects).reduce((a, b) => a + b, 0);
    log(
      `storage       ${path.join(data, DATA_LAYOUT.storage)}  (${objects} objects; ${stored.pruned} empty files of deleted ones removed)`,
    );
    const bundle = path.join(data, DATA_LAYOUT.bundle);
    if (options.build !== false) await buildBundle(settings, bundle, log);
    else if (!existsSync(bundle)) throw new Error(`no bundle in ${bundle}: start once without --no-build`);
    const listen = options.listen ?? "127.0.0.1:8787";
    const control = `127.0.0.1:${options.controlPort ?? (await freePort())}`;
    const clash = Object.keys(options.secrets).find((name) => options.vars?.[name] !== undefined);
    if (clash) throw new Error(`${clash} is given both as a var and as a secret`);
    const vars = { ...settings.vars, ...options.vars };
    for (const name of Object.keys(options.secrets)) delete vars[name];
    const configFile = path.join(data, DATA_LAYOUT.config);
    const config = renderWorkerdConfig({
      settings,
      configDir: data,
      bundle,
      storage: path.join(data, DATA_LAYOUT.storage),
      listen,
      control,
      vars,
      secrets: Object.keys(options.secrets).sort(),
      network: options.network ?? DEFAULT_NETWORK,
    });
    writeFileSync(configFile, config);
    const { child, output } = startWorkerd(configFile, options.secrets, options.onLine);
    if (child.pid) lock.holdFor(child.pid);
    const url = `http://${localAddress(listen)}`;
    const controlUrl = `http://${control}`;
    const exited = new Promise<void>((resolve) => child.once("exit", () => resolve()));
    await answering(url, child, Date.now() + (options.readyTimeoutMs ?? 30_000), () => output.tail);
    log(`workerd       ${url}  (pid ${child.pid}, config ${configFile})`);
    log(`control       ${controlUrl}  (loopback only: GET /__scheduled?cron=<expr> runs the scheduled handler)`);
    let firer: CronFirer | undefined;
    if (options.cron !== false && settings.crons.length) {
      firer = fireCrons(controlUrl, settings.crons, log);
      log(`cron          ${settings.crons.join(", ")}  (the scheduled handler, fired on schedule as on Cloudflare)`);
    }
    const stop = async () => {
      firer?.stop();
      await stopChild(child, exited);
      lock.release();
    };
    return { url, controlUrl, crons: settings.crons, child, stop };
  } catch (error) {
    lock.release();
    throw error;
  }
}

/** `NAME:value` pairs as a record; throws on one without a colon or with a name vars cannot have. */
export function parseVars(pairs: string[]): Record<string, string> {
  const vars: Record<string, string> = {};
  for (const pair of pairs) {
    const colon = pair.indexOf(":");
    const name = pair.slice(0, colon);
    if (colon <= 0 || !/^[A-Za-z_][A-Za-z0-9_]*$/.test(name))
      throw new Error(`--var ${pair}: expected NAME:value, NAME letters, digits and _`);
    vars[name] = pair.slice(colon + 1);
  }
  return vars;
}

/** The address to reach a listening socket at from this machine: a wildcard host is 127.0.0.1. */
export function localAddress(listen: string): string {
  const at = listen.lastIndexOf(":");
  const host = listen.slice(0, at);
  const port = listen.slice(at + 1);
  return ["*", "0.0.0.0", "[::]", ""].includes(host) ? `127.0.0.1:${port}` : `${host}:${port}`;
}

/** The workerd child processes still running: killed if this process exits without stopping them. */
const running = new Set<ChildProcess>();
process.once("exit", () => running.forEach((child) => child.kill("SIGKILL")));

/**
 * `workerd serve --experimental <config>`: --experimental because the one way into a Worker's
 * scheduled handler from outside, `Fetcher.scheduled` (the front Worker's compatibility flag
 * `service_binding_extra_handlers`), is behind it; the coordinator's Worker uses no
 * experimental feature. Its environment holds the secrets and nothing else. Its output goes to
 * `onLine`, or else to this process's own stdout and stderr; the last of it is kept for errors.
 */
function startWorkerd(configFile: string, secrets: Record<string, string>, onLine?: (line: string) => void) {
  // The package's own answer (its main exports the binary's path): the platform package's
  // binary, whether or not the package's install script put a copy in its bin/.
  const workerd = (createRequire(import.meta.url)("workerd") as { default: string }).default;
  const child = spawn(workerd, ["serve", "--experimental", configFile], {
    env: { ...secrets },
    stdio: ["ignore", "pipe", "pipe"],
  });
  running.add(child);
  child.once("exit", () => running.delete(child));
  const output = { tail: "" };
  const take = (to: NodeJS.WriteStream) => (chunk: Buffer) => {
    output.tail = (output.tail + chunk.toString()).slice(-4000);
    if (onLine)
      chunk
        .toString()
        .split("\n")
        .filter((l) => l.trim())
        .forEach(onLine);
    else to.write(chunk);
  };
  child.stdout.on("data", take(process.stdout));
  child.stderr.on("data", take(process.stderr));
  return { child, output };
}

/** Waits until the public socket answers (any answer: /health says 503 while storage is away). */
async function answering(url: string, child: ChildProcess, deadline: number, tail: () => string): Promise<void> {
  for (;;) {
    if (child.exitCode !== null || child.signalCode !== null)
      throw new Error(`workerd exited (${child.exitCode ?? child.signalCode}) before it answered:\n${tail()}`);
    if (Date.now() > deadline) {
      child.kill("SIGKILL");
      throw new Error(`workerd did not answer on ${url} in time:\n${tail()}`);
    }
    try {
      await (await fetch(`${url}/health`, { signal: AbortSignal.timeout(2_000) })).arrayBuffer();
      return;
    } catch {
      await new Promise((r) => setTimeout(r, 100));
    }
  }
}

/** SIGTERM, then SIGKILL after 5 s. */
async function stopChild(child: ChildProcess, exited: Promise<void>): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return;
  child.kill("SIGTERM");
  const timer = setTimeout(() => child.kill("SIGKILL"), 5_000);
  await exited;
  clearTimeout(timer);
}
