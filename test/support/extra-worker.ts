import { mkdtempSync } from "node:fs";
import path from "node:path";
import { freePort } from "../../infra/redis-server.js";
import { CoordinatorClient } from "../../shared/client/index.js";
import type { ExtraWorker } from "./stack-types.js";
import { startWorkerProcess, type WorkerProcessOptions } from "./worker-process.js";

/** Terminal colour codes, taken out of a Worker's output. */
export const ANSI = new RegExp(`${String.fromCharCode(27)}\\[[0-9;]*m`, "g");

/**
 * Another Worker process beside a private stack's (PrivateStack.startWorker): the stack's Worker
 * options (the same REST endpoint, signing key and vars, `vars` added) on a port of its own,
 * with Durable Object storage of its own under `dir` and no inspector, control port or build.
 * `stopped` runs when it is stopped, so the stack forgets it.
 */
export async function startExtraWorker(
  dir: string,
  stackOptions: WorkerProcessOptions,
  vars: Record<string, string>,
  stopped: (worker: ExtraWorker) => void,
): Promise<ExtraWorker> {
  let log = "";
  const { inspect: _inspected, controlPort: _control, build: _build, ...options } = stackOptions;
  const extra = await startWorkerProcess({
    ...options,
    port: await freePort(),
    persistTo: mkdtempSync(path.join(dir, "worker-state-extra-")),
    vars: { ...options.vars, ...vars },
    onLine: (line: string) => (log = `${log}${line.replace(ANSI, "")}\n`.slice(-200_000)),
  });
  const handle: ExtraWorker = {
    url: extra.url,
    anonymous: new CoordinatorClient({ baseUrl: extra.url }),
    log: () => log,
    stop: async () => {
      stopped(handle);
      await extra.stop();
    },
  };
  return handle;
}
