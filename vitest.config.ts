import { cloudflareTest } from "@cloudflare/vitest-plugin";
import { defineConfig } from "vitest/config";
import { testStackConfig } from "./test/support/stack-config.js";

// One redis-server and one REST endpoint serve the whole run (test/support/global-setup.ts);
// their ports are chosen here so workerd's bindings can point at them.
const stack = await testStackConfig();

export default defineConfig({
  test: {
    globalSetup: ["test/support/global-setup.ts"],
    // One test file at a time, as vitest runs them on a 2-core machine. The end-to-end files
    // mostly wait, so two or three at once would take 10 or 8 minutes instead of 16, but the
    // longest gap between deliveries that dispatch.test.ts bounds at 1.5 s then reached 1.1 s
    // (three) and 1.4 s (two), against 0.5 s alone: too close to pass every time.
    maxWorkers: 1,
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
