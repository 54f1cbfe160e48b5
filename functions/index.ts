import { createApp } from "./api/index.js";
import type { Env } from "./env.js";

const app = createApp();

/** The Worker: the Hono API answers every request. */
export default {
  fetch: (request, env, ctx) => app.fetch(request, env, ctx),
} satisfies ExportedHandler<Env>;
