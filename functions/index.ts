import { createApp } from "./api/index.js";
import type { Env } from "./env.js";
import { sweep } from "./supervisor/sweep.js";

export { FlowCoordinator } from "./flow/coordinator.js";

const app = createApp();

/** The Worker: the Hono API answers requests; the cron trigger runs the supervisor's sweep. */
export default {
  fetch: (request, env, ctx) => app.fetch(request, env, ctx),
  scheduled: (_controller, env, ctx) => ctx.waitUntil(sweep(env).then(() => undefined)),
} satisfies ExportedHandler<Env>;
