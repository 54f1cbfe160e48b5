/**
 * `npm run dev`: the local stack, one line per component, until Ctrl-C.
 *
 * Env: REDIS_URL (use that Redis instead of starting redis-server), DEV_REDIS_PORT (6390),
 * REST_PORT (8079), WORKER_PORT (8787), DEV_VERBOSE=1 (show wrangler's output).
 */
import path from "node:path";
import { fileURLToPath } from "node:url";
import { startLocalStack } from "./stack.js";

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..");
const port = (name: string, fallback: number) => Number(process.env[name] || fallback);

try {
  const stack = await startLocalStack({
    root,
    ...(process.env.REDIS_URL ? { redisUrl: process.env.REDIS_URL } : {}),
    redisPort: port("DEV_REDIS_PORT", 6390),
    restPort: port("REST_PORT", 8079),
    workerPort: port("WORKER_PORT", 8787),
    verbose: process.env.DEV_VERBOSE === "1",
    log: (line) => console.log(line),
  });
  const health = await fetch(`${stack.workerUrl}/health`);
  console.log(`health        ${health.status} ${await health.text()}`);
  console.log(`console       ${stack.workerUrl}/console/  (sign in with a flowc key file; API reference at /docs/)`);
  console.log("ready: Ctrl-C stops all components");
  let stopping = false;
  const stop = (signal: string) => {
    if (stopping) return;
    stopping = true;
    console.log(`${signal}: stopping`);
    void stack.stop().then(() => {
      console.log("stopped");
      process.exit(0);
    });
  };
  process.on("SIGINT", () => stop("SIGINT"));
  process.on("SIGTERM", () => stop("SIGTERM"));
} catch (error) {
  console.error(`dev: ${(error as Error).message}`);
  process.exit(1);
}
