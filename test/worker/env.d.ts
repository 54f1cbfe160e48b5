import type { Env as WorkerEnv } from "../../functions/core/env.js";
import type * as WorkerModule from "../../functions/index.js";

// The test integration types `env` from "cloudflare:workers" and `SELF` with the Worker's own
// bindings and module (the Worker itself names its Env explicitly, so it needs none of this).
/* eslint-disable @typescript-eslint/no-empty-object-type --
   the runtime's types are a namespace of interfaces meant to be merged into, not module syntax. */
declare global {
  namespace Cloudflare {
    // Types `env` from "cloudflare:workers" and the test integration with our bindings.
    interface Env extends WorkerEnv {}
    interface GlobalProps {
      mainModule: typeof WorkerModule;
    }
  }
}
/* eslint-enable @typescript-eslint/no-empty-object-type */
