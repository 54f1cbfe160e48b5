import { createApp } from "./api/index.js";
import type { Env } from "./core/env.js";
import { sweep } from "./supervisor/sweep.js";

export { Dispatcher } from "./dispatch/dispatcher.js";
export { ContextFeed } from "./feed/context-feed.js";
export { FlowCoordinator } from "./flow/coordinator.js";
export { Scheduler } from "./schedule/scheduler.js";

/**
 * The API, built by the first request rather than at the isolate's start: an isolate woken only
 * for a Durable Object or the cron never registers the routes (docs/architecture.md, "Cold
 * start"). Built synchronously, so nothing else changes for the first request.
 */
let app: ReturnType<typeof createApp> | undefined;

/** The Worker: the Hono API answers requests; the cron trigger runs the supervisor's sweep. */
export default {
  fetch: (request, env, ctx) => (app ??= createApp()).fetch(request, env, ctx),
  scheduled: (_controller, env, ctx) =>
    ctx.waitUntil(
      sweep(env).then(
        (r) => {
          // The cron fires every minute: an idle sweep stays quiet, one that acted says what it did.
          if (r.contexts + r.failed > 0)
            console.log(
              `sweep: handed=${r.contexts} failed=${r.failed}${r.left ? " (more left for the next run)" : ""}`,
            );
        },
        // Storage away: the next minute's sweep tries again (an error here would only say "uncaught").
        (error: unknown) => console.warn(`sweep: ${(error as Error).message}`),
      ),
    ),
} satisfies ExportedHandler<Env>;
