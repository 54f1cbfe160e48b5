import { randomBytes } from "node:crypto";
import { freePort } from "../../infra/redis-server.js";
import { generateKeyPair } from "../../shared/auth/index.js";

/** Ports and token of the stack the test run starts (redis-server + REST endpoint). */
export interface TestStackConfig {
  redisPort: number;
  restPort: number;
  restToken: string;
  restUrl: string;
  redisUrl: string;
  /** The coordinator's signing key (a private JWK as JSON) for this run. */
  coordinatorKey: string;
  /** The port of the slow runner (test/support/slow-runner.ts). */
  slowRunnerPort: number;
}

/**
 * Chooses the stack's free ports and token once per test run and records them in the
 * environment, so the config (which hands them to workerd), the global setup (which starts the
 * processes) and Node test files all agree.
 */
export async function testStackConfig(): Promise<TestStackConfig> {
  if (!process.env.TEST_REST_URL) {
    const redisPort = await freePort();
    const restPort = await freePort();
    process.env.TEST_REDIS_PORT = String(redisPort);
    process.env.TEST_REDIS_URL = `redis://127.0.0.1:${redisPort}`;
    process.env.TEST_REST_URL = `http://127.0.0.1:${restPort}`;
    process.env.TEST_REST_PORT = String(restPort);
    process.env.TEST_REST_TOKEN = randomBytes(18).toString("base64url");
    process.env.TEST_COORDINATOR_KEY = JSON.stringify(await generateKeyPair());
    process.env.TEST_SLOW_RUNNER_PORT = String(await freePort());
  }
  return readTestStackConfig();
}

/** The stack's settings as recorded in the environment. */
export function readTestStackConfig(): TestStackConfig {
  const {
    TEST_REDIS_PORT,
    TEST_REST_PORT,
    TEST_REST_TOKEN,
    TEST_REST_URL,
    TEST_REDIS_URL,
    TEST_COORDINATOR_KEY,
    TEST_SLOW_RUNNER_PORT,
  } = process.env;
  if (
    !TEST_REDIS_PORT ||
    !TEST_REST_PORT ||
    !TEST_REST_TOKEN ||
    !TEST_REST_URL ||
    !TEST_REDIS_URL ||
    !TEST_COORDINATOR_KEY ||
    !TEST_SLOW_RUNNER_PORT
  ) {
    throw new Error("the test stack is not configured: run the tests through `npm test` (vitest.config.ts)");
  }
  return {
    redisPort: Number(TEST_REDIS_PORT),
    restPort: Number(TEST_REST_PORT),
    restToken: TEST_REST_TOKEN,
    restUrl: TEST_REST_URL,
    redisUrl: TEST_REDIS_URL,
    coordinatorKey: TEST_COORDINATOR_KEY,
    slowRunnerPort: Number(TEST_SLOW_RUNNER_PORT),
  };
}
