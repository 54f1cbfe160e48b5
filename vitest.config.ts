import { cloudflareTest } from "@cloudflare/vitest-plugin";
import { defineConfig } from "vitest/config";
import { testStackConfig } from "./test/support/stack-config.js";

// One redis-server and one REST endpoint serve the whole run (test/support/global-setup.ts);
// their ports are chosen here so workerd's bindings can point at them.
const stack = await testStackConfig();

export default defineConfig({
  test: {
    globalSetup: ["test/support/global-setup.ts"],
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
