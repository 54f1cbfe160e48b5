import type { CoordinatorClient } from "../../shared/client/index.js";
import type { WatchedProcess } from "./process.js";

// The shapes a private stack (private-stack.ts) hands out and takes, and the arithmetic of its
// command counts.

/**
 * A test runner (test/support/test-runner.ts) started as a process, listening on `port`. Its
 * stdout is watched; its stderr goes to the test run's.
 */
export interface TestRunnerProcess extends WatchedProcess {
  port: number;
}

/**
 * Another Worker process on a private stack's Redis (see `startWorker`): its own `wrangler dev`,
 * workerd and Durable Object storage, as a second machine's isolates would be.
 */
export interface ExtraWorker {
  url: string;
  /** A client of this process that signs nothing (`.as(signer)` for one that does). */
  anonymous: CoordinatorClient;
  /** What this process printed lately. */
  log(): string;
  /** Stops it (the stack's `stop` stops it too). */
  stop(): Promise<void>;
}

/** How a private stack differs from the local stack `npm run dev` starts. */
export interface PrivateStackOptions {
  /**
   * Fire the cron triggers on their schedule, as `npm run dev` and production do (default). Off
   * for tests that count Redis commands: a sweep in the middle would be counted too.
   */
  cron?: boolean;
  /** Extra Worker vars. */
  vars?: Record<string, string>;
  /** The Worker's inspector on this port, the script not minified (a CPU profile's names). */
  inspect?: { port: number };
  /**
   * How the Worker runs: under `wrangler dev` (default), or on plain workerd as `npm run serve`
   * runs it in production (infra/serve/), its data folder in the stack's folder.
   */
  target?: "wrangler" | "serve";
  /**
   * A Redis Cluster (`host:port,…`) instead of a redis-server of the stack's own: the REST
   * endpoint fronts it (REDIS_CLUSTER) and the Worker is told (STORAGE_CLUSTER). Parts of the
   * stack that reach redis-server itself (`redisUrl`, `pauseRedis`, …) are not there then.
   */
  cluster?: { seeds: string };
}

/** The difference of two command counts, by command, and its total. */
export function commandDelta(
  before: Map<string, number>,
  after: Map<string, number>,
): { total: number; byCommand: Record<string, number> } {
  const byCommand: Record<string, number> = {};
  let total = 0;
  for (const [name, calls] of after) {
    const delta = calls - (before.get(name) ?? 0);
    if (delta > 0) {
      byCommand[name] = delta;
      total += delta;
    }
  }
  return { total, byCommand };
}
