import { OpenAPIHono } from "@hono/zod-openapi";
import { HTTPException } from "hono/http-exception";
import { invalidInput, onError } from "./errors.js";
import { registerHealth } from "./health.js";
import { Problem } from "./problem.js";
import { withStore, type AppEnv } from "./store.js";

/**
 * The HTTP API: every route is declared with zod schemas, so its input is validated at the edge
 * and the OpenAPI document is generated from the same declarations.
 */
export function createApp(): OpenAPIHono<AppEnv> {
  const app = new OpenAPIHono<AppEnv>({
    defaultHook: (result) => {
      if (!result.success) throw invalidInput(result.error, result.target);
    },
  });
  app.onError((error, c) => {
    if (error instanceof HTTPException && error.status < 500) {
      return new Problem(error.status as 400, "bad-request", "Bad request", error.message).toResponse(c.req.path);
    }
    return onError(error, c);
  });
  app.notFound((c) => new Problem(404, "no-route", "Not found", `no route for ${c.req.method} ${c.req.path}`).toResponse(c.req.path));
  app.use("*", withStore);
  registerHealth(app);
  return app;
}
