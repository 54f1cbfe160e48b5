import { cloudflareTest } from "@cloudflare/vitest-plugin";
import { defineConfig } from "vitest/config";
import { testStackConfig } from "./test/support/stack-config.js";

// One redis-server and one REST endpoint serve the whole run (test/support/global-setup.ts);
// their ports are chosen here so workerd's bindings can point at them.
const stack = await testStackConfig();

/**
 * End-to-end files that bound a timing, run after the others, alone. sweep-scale.test.ts counts
 * commands per due context, and those stay at 2 only while one sweep of 1,000 contexts ends within
 * its claims' 50 s lease: beside another heavy file it once took 127 s (and 264 s), its claims
 * lapsed and were taken again, and the count passed 3.
 */
const ALONE = ["test/e2e/dispatch.test.ts", "test/e2e/sweep-scale.test.ts"];

export default defineConfig({
  test: {
    globalSetup: ["test/support/global-setup.ts"],
    // Two test files at once: the end-to-end files mostly wait on alarms, deadlines and runners,
    // and one at a time (what vitest picks on 2 cores) left the CPU idle half the time: about 10
    // minutes instead of 16. Files that bound a timing run afterwards, alone (`alone` below).
    maxWorkers: 2,
    projects: [
      {
        test: {
          name: "unit",
          include: ["test/unit/**/*.test.ts"],
          environment: "node",
          // Property and scale tests run thousands of flows through the machine: a second or two
          // alone, several beside two e2e files' stacks (the default 5 s was passed on a loaded machine).
          testTimeout: 30_000,
        },
      },
      {
        test: {
          name: "e2e",
          include: ["test/e2e/**/*.test.ts"],
          exclude: ALONE,
          environment: "node",
          testTimeout: 120_000,
          hookTimeout: 120_000,
        },
      },
      {
        // The longest gap between deliveries that dispatch.test.ts bounds at 1.5 s is 0.5 s
        // alone, but reached 1.4 s with another file beside it: these run last, one at a time.
        test: {
          name: "alone",
          include: ALONE,
          environment: "node",
          testTimeout: 120_000,
          hookTimeout: 120_000,
          maxWorkers: 1,
          sequence: { groupOrder: 1 },
        },
      },
      {
        // Over one real Redis Cluster (test/support/cluster-setup.ts), one file at a time.
        test: {
          name: "cluster",
          include: ["test/cluster/**/*.test.ts"],
          environment: "node",
          globalSetup: ["test/support/cluster-setup.ts"],
          testTimeout: 120_000,
          hookTimeout: 120_000,
          maxWorkers: 1,
        },
      },
      {
        plugins: [
          cloudflareTest({
            wrangler: { configPath: "./wrangler.test.toml" },
            miniflare: {
              bindings: {
                UPSTASH_REDIS_REST_URL: stack.restUrl,
                UPSTASH_REDIS_REST_TOKEN: stack.restToken,
                COORDINATOR_SIGNING_KEY: stack.coordinatorKey,
                // Not the Worker's: where test/support/slow-runner.ts listens, for worker tests.
                TEST_SLOW_RUNNER_URL: `http://127.0.0.1:${stack.slowRunnerPort}/`,
              },
            },
          }),
        ],
        test: {
          name: "worker",
          include: ["test/worker/**/*.test.ts"],
          testTimeout: 30_000,
        },
      },
    ],
  },
});
