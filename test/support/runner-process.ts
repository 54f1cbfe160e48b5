import { spawn } from "node:child_process";
import { writeFileSync } from "node:fs";
import path from "node:path";
import { freePort } from "../../infra/redis-server.js";
import { generateKeyPair, type PrivateJwk } from "../../shared/auth/index.js";
import type { CoordinatorClient } from "../../shared/client/index.js";
import { watchProcess, type WatchedProcess } from "./process.js";

/** A reference runner started as its own process (`node --import tsx runner/main.ts …`). */
export type RunnerProcess = WatchedProcess;

const root = path.resolve(import.meta.dirname, "../..");

/**
 * Starts the runner CLI with `args` from the repository root, with an environment free of the
 * caller's RUNNER_* settings, and collects its output.
 */
export function spawnRunner(args: string[]): RunnerProcess {
  const env = Object.fromEntries(Object.entries(process.env).filter(([name]) => !name.startsWith("RUNNER_")));
  const child = spawn(process.execPath, ["--import", "tsx", "runner/main.ts", ...args], {
    cwd: root,
    env,
    stdio: ["ignore", "pipe", "pipe"],
  });
  return watchProcess(child, "the runner");
}

/** A runner registered in a context, with its key and (push) address; `start` runs its process. */
export interface RegisteredRunner<P> {
  id: number;
  jwk: PrivateJwk;
  /** The port it is to listen on (push), 0 for a pull runner. */
  port: number;
  start(): Promise<P>;
}

/** A reference runner once registered: where it keeps its jobs' folders, and its push address. */
export interface RegisteredReferenceRunner extends RegisteredRunner<RunnerProcess> {
  workDir: string;
  /** `http://127.0.0.1:<port>/` for a push runner, "" for a pull runner. */
  address: string;
}

/** Writes a runner's private key where a runner process reads it (mode 0600); returns the file. */
export function writeKeyFile(dir: string, contextId: number, runnerId: number, jwk: PrivateJwk): string {
  const keyFile = path.join(dir, `runner-${contextId}-${runnerId}.json`);
  writeFileSync(keyFile, JSON.stringify(jwk), { mode: 0o600 });
  return keyFile;
}

export interface ReferenceRunnerOptions {
  /** The coordinator's URL. */
  url: string;
  /** A temporary folder for the key file and the jobs' work folder. */
  dir: string;
  mode: "push" | "pull";
  /** Extra command line arguments. */
  args?: string[];
  /** Every process `start` starts is added here, for the caller's cleanup. */
  started?: RunnerProcess[];
}

/**
 * Registers a reference runner (runner/) of sh and python jobs in `contextId`, push at a free
 * port or pull (`local`), to be started as a process by `start`, which resolves once it listens
 * (push) or polls (pull).
 */
export async function registerReferenceRunner(
  admin: CoordinatorClient,
  contextId: number,
  options: ReferenceRunnerOptions,
): Promise<RegisteredReferenceRunner> {
  const { url, dir, mode, args = [], started } = options;
  const jwk = await generateKeyPair();
  const port = mode === "push" ? await freePort() : 0;
  const address = mode === "push" ? `http://127.0.0.1:${port}/` : "";
  const runner = await admin.createRunner(contextId, {
    pubkey: jwk.x,
    runner_type: "sh",
    script_types: ["sh", "python"],
    concurrency: 4,
    ...(mode === "push" ? { address } : { local: true }),
  });
  const workDir = path.join(dir, `work-${contextId}-${runner.id}`);
  const start = async () => {
    const keyFile = writeKeyFile(dir, contextId, runner.id, jwk);
    const common = [
      "--url",
      url,
      "--context",
      String(contextId),
      "--runner",
      String(runner.id),
      "--key-file",
      keyFile,
      "--work-dir",
      workDir,
    ];
    const proc = spawnRunner([
      ...common,
      ...(mode === "push" ? ["--listen", `127.0.0.1:${port}`] : ["--pull"]),
      ...args,
    ]);
    started?.push(proc);
    await proc.waitForLine(mode === "push" ? /listening on http:\/\/127\.0\.0\.1:\d+\// : /pulling from /, 30_000);
    return proc;
  };
  return { id: runner.id, jwk, port, workDir, address, start };
}
