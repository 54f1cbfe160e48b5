import { cloudflareTest } from "@cloudflare/vitest-plugin";
import { defineConfig } from "vitest/config";
import { testStackConfig } from "./test/support/stack-config.js";

// One redis-server and one REST endpoint serve the whole run (test/support/global-setup.ts);
// their ports are chosen here so workerd's bindings can point at them.
const stack = await testStackConfig();

export default defineConfig({
  test: {
    globalSetup: ["test/support/global-setup.ts"],
    // Two test files at once. The end-to-end files mostly wait (for alarms, deadlines, runners,
    // a sweep), and on the 2-core machines of CI vitest ran one file at a time (as measured),
    // leaving the CPU idle half the time: 16 minutes of tests, 10 with two at once. Three took 8,
    // but the longest gap between deliveries that dispatch.test.ts bounds at 1.5 s grew from
    // 0.5 s to 1.1 s; with two it stays under 0.8 s. Every file has its own key prefix, or a
    // stack of its own where it counts or breaks things, so files never see each other's state.
    maxWorkers: 2,
    projects: [
      {
        test: {
          name: "unit",
          include: ["test/unit/**/*.test.ts"],
          environment: "node",
        },
      },
      {
        test: {
          name: "e2e",
          include: ["test/e2e/**/*.test.ts"],
          environment: "node",
          testTimeout: 120_000,
          hookTimeout: 120_000,
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
