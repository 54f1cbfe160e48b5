import { spawn } from "node:child_process";
import { writeFileSync } from "node:fs";
import path from "node:path";
import { cronsOf, fireCrons, type CronFirer } from "../../infra/cron.js";
import { freePort } from "../../infra/redis-server.js";
import { startWranglerDev, type WranglerDev, type WranglerDevOptions } from "../../infra/wrangler.js";
import { watchProcess } from "./process.js";

/**
 * How a stack runs the coordinator's Worker: under `wrangler dev` (the development server every
 * stack used so far), or as `npm run serve` runs it in production, on plain workerd.
 */
export type WorkerTarget = "wrangler" | "serve";

/** What starts a Worker process of either target. */
export interface WorkerProcessOptions extends WranglerDevOptions {
  target?: WorkerTarget;
  /** The secrets, as the env file holds them: `serve` takes them in its environment. */
  secrets: Record<string, string>;
  /** `serve`: build the bundle first (false: run the one `persistTo` holds, as a restart does). */
  build?: boolean;
  /** `serve`: the control socket's port, kept across restarts. */
  controlPort?: number;
  /** Fire the cron triggers: serve fires them itself; wrangler dev never does, so its stack does (`stackCrons`). */
  cron?: boolean;
}

/** A Worker process of either target: where requests go, and where its scheduled handler is fired. */
export interface WorkerProcess extends WranglerDev {
  /** `GET ${scheduledUrl}/__scheduled?cron=…` runs the scheduled handler once. */
  scheduledUrl: string;
}

const root = path.resolve(import.meta.dirname, "../..");

/**
 * Starts the coordinator's Worker on `options.port`: `wrangler dev --test-scheduled` (its
 * `/__scheduled` on the Worker's own port), or `npm run serve`'s own process (infra/serve/main.ts,
 * the secrets in its environment), with its data folder in `persistTo` and its scheduled handler
 * on the control socket.
 */
export async function startWorkerProcess(options: WorkerProcessOptions): Promise<WorkerProcess> {
  if (options.target !== "serve") {
    const worker = await startWranglerDev(options);
    return { ...worker, scheduledUrl: worker.url };
  }
  if (options.inspect) throw new Error("a serve stack has no inspector: profile under wrangler dev");
  if (!options.persistTo) throw new Error("a serve stack needs persistTo: its data folder");
  const args = [
    "--import",
    "tsx",
    "infra/serve/main.ts",
    "--data",
    options.persistTo,
    "--listen",
    `127.0.0.1:${options.port}`,
    ...(options.controlPort ? ["--control-port", String(options.controlPort)] : []),
    ...Object.entries(options.vars ?? {}).flatMap(([name, value]) => ["--var", `${name}:${value}`]),
    ...(options.build === false ? ["--no-build"] : []),
    ...(options.cron ? [] : ["--no-cron"]),
  ];
  const child = spawn(process.execPath, args, {
    cwd: root,
    env: { ...process.env, ...options.secrets },
    stdio: ["ignore", "pipe", "pipe"],
  });
  const proc = watchProcess(child, "npm run serve");
  // Should this process exit without stopping it, serve (and with it workerd) goes too.
  const orphaned = () => child.kill("SIGTERM");
  process.once("exit", orphaned);
  void proc.exited.then(() => process.off("exit", orphaned));
  if (options.onLine) {
    const onLine = options.onLine;
    const lines = (chunk: Buffer) =>
      chunk
        .toString()
        .split("\n")
        .filter((l) => l.trim())
        .forEach(onLine);
    child.stdout?.on("data", lines);
    child.stderr?.on("data", lines);
  }
  try {
    const ready = await proc.waitForLine(/^ready\s+http:\/\/\S+\/health/, options.readyTimeoutMs ?? 90_000);
    const control = /^control\s+(http:\/\/\S+)/m.exec(proc.output())?.[1];
    if (!control) throw new Error(`npm run serve did not say where its control socket is:\n${proc.output()}`);
    const url = /(http:\/\/\S+)\/health/.exec(ready)?.[1] as string;
    const stop = async () => {
      if (child.exitCode !== null || child.signalCode !== null) return;
      // serve stops workerd on SIGTERM (SIGKILL after 5 s), then exits itself.
      child.kill("SIGTERM");
      const timer = setTimeout(() => child.kill("SIGKILL"), 10_000);
      await proc.exited;
      clearTimeout(timer);
    };
    return { url, scheduledUrl: control, child, stop };
  } catch (error) {
    await proc.kill();
    throw error;
  }
}

/**
 * How a private stack (private-stack.ts) starts its Worker: the target its options name, or
 * TEST_WORKER_TARGET's (`serve` runs every private stack of a test run on serve), the secrets in
 * an env file in `dir` (wrangler dev) or in the environment (serve), storage and alarms kept in
 * `dir` across restarts, local plain-http runners allowed. serve fires its own cron triggers
 * unless told not to, as in production; wrangler dev's stack fires them itself.
 */
export async function stackWorkerOptions(
  dir: string,
  cwd: string,
  options: { target?: WorkerTarget; cron?: boolean; vars?: Record<string, string>; inspect?: { port: number } },
  secrets: Record<string, string>,
): Promise<WorkerProcessOptions> {
  const envFile = path.join(dir, "worker.env");
  writeFileSync(envFile, dotenv(secrets));
  const target = options.target ?? (process.env.TEST_WORKER_TARGET === "serve" ? "serve" : "wrangler");
  return {
    target,
    secrets,
    port: await freePort(),
    cron: options.cron !== false,
    ...(target === "serve" ? { controlPort: await freePort() } : {}),
    envFile,
    cwd,
    persistTo: path.join(dir, target === "serve" ? "serve-data" : "wrangler-state"),
    vars: { ALLOW_INSECURE_HTTP: "true", KEY_PREFIX: "", ...options.vars },
    ...(options.inspect ? { inspect: options.inspect } : {}),
  };
}

/** A private stack's own cron firer: for `wrangler dev` (which never fires them) when its cron is on; serve fires its own. */
export function stackCrons(worker: WorkerProcess, options: WorkerProcessOptions): CronFirer | undefined {
  if (options.target === "serve" || options.cron === false) return undefined;
  return fireCrons(worker.scheduledUrl, cronsOf(path.join(root, "wrangler.toml")));
}

/** The secrets as a dotenv file's text (what `wrangler dev --env-file` reads). */
export function dotenv(secrets: Record<string, string>): string {
  return Object.entries(secrets)
    .map(([name, value]) => `${name}='${value}'\n`)
    .join("");
}
