import { writeFileSync } from "node:fs";
import path from "node:path";
import { freePort } from "../../infra/redis-server.js";
import { startWranglerDev } from "../../infra/wrangler.js";
import { connectRedis } from "../../shared/store/redis.js";
import { deletePrefix, freshPrefix } from "./prefix.js";
import { readTestStackConfig } from "./stack-config.js";

const root = path.resolve(import.meta.dirname, "../..");

/** A `wrangler dev` of one test file's own (see {@link startTestWorker}). */
export interface TestWorker {
  url: string;
  /** Stops workerd and deletes every key under the file's prefix. */
  stop(): Promise<void>;
}

/**
 * Starts `wrangler dev` on a free port over the test run's shared stack (its REST endpoint and
 * coordinator key), under a fresh key prefix named after `label`, so test files never see each
 * other's keys. The secrets go in an env file in `dir` (the caller's temporary folder).
 */
export async function startTestWorker(label: string, dir: string): Promise<TestWorker> {
  const stack = readTestStackConfig();
  const prefix = freshPrefix(label);
  const envFile = path.join(dir, "worker.env");
  writeFileSync(
    envFile,
    `UPSTASH_REDIS_REST_URL=${stack.restUrl}\nUPSTASH_REDIS_REST_TOKEN=${stack.restToken}\nCOORDINATOR_SIGNING_KEY='${stack.coordinatorKey}'\n`,
    { mode: 0o600 },
  );
  const worker = await startWranglerDev({
    port: await freePort(),
    envFile,
    cwd: root,
    vars: { KEY_PREFIX: prefix, ALLOW_INSECURE_HTTP: "true" },
    readyTimeoutMs: 90_000,
  });
  return {
    url: worker.url,
    async stop() {
      await worker.stop();
      await deletePrefix(connectRedis({ url: stack.restUrl, token: stack.restToken }), prefix);
    },
  };
}
