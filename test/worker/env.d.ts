import type { Env as WorkerEnv } from "../../functions/core/env.js";
import type * as WorkerModule from "../../functions/index.js";

// The test integration types `env` from "cloudflare:workers" and `SELF` with the Worker's own
// bindings and module (the Worker itself names its Env explicitly, so it needs none of this).
// The runtime's types are a namespace of interfaces meant to be merged into, not module syntax.
declare global {
  namespace Cloudflare {
    // Types `env` from "cloudflare:workers" and the test integration with our bindings, and the
    // one the tests add (vitest.config.ts).
    interface Env extends WorkerEnv {
      /** Where the slow runner listens (test/support/slow-runner.ts). */
      TEST_SLOW_RUNNER_URL: string;
    }
    interface GlobalProps {
      mainModule: typeof WorkerModule;
    }
  }
}
