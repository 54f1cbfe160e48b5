import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { startRestServer, DEFAULT_REST_OPTIONS } from "../../infra/redis-rest/index.js";
import { startRedisServer } from "../../infra/redis-server.js";
import { buildFlowcBundle } from "./flowc-bundle.js";
import { startSlowRunner } from "./slow-runner.js";
import { readTestStackConfig } from "./stack-config.js";

/**
 * Starts the real stack every test file talks to: a redis-server of our own (own port, own
 * folder, nothing on disk), the Upstash-compatible REST endpoint in front of it, and a slow
 * runner (`startSlowRunner`); and bundles the CLI the tests run (flowc-bundle.ts). Stops them
 * when the run ends.
 */
export default async function setup(): Promise<() => Promise<void>> {
  const config = readTestStackConfig();
  const dir = mkdtempSync(path.join(tmpdir(), "flow-coordinator-test-"));
  const redis = await startRedisServer({ port: config.redisPort, dir });
  const rest = await startRestServer({
    ...DEFAULT_REST_OPTIONS,
    redisUrl: redis.url,
    port: config.restPort,
    token: config.restToken,
  });
  const slowRunner = await startSlowRunner(config.slowRunnerPort);
  await buildFlowcBundle();
  return async () => {
    await slowRunner.close();
    await rest.close();
    await redis.stop();
    rmSync(dir, { recursive: true, force: true });
  };
}
