import { OpenAPIHono } from "@hono/zod-openapi";
import { defaultHook, onError } from "./errors.js";
import { authenticate } from "./auth.js";
import { limitHeaders } from "./limits.js";
import { countRequests } from "./metrics.js";
import { openApiDocument } from "./openapi.js";
import { registerOperations } from "./operations.js";
import { Problem } from "../core/problem.js";
import { registerRpc } from "./rpc.js";
import { registerActorRoutes } from "./routes/actors.js";
import { registerContextRoutes } from "./routes/contexts.js";
import { registerEventRoutes } from "./routes/events.js";
import { registerFlowRoutes } from "./routes/flows.js";
import { registerJobRoutes } from "./routes/jobs.js";
import { registerMessageRoutes } from "./routes/messages.js";
import { registerRecoveryRoutes } from "./routes/recovery.js";
import { registerRunnerEventRoutes } from "./routes/runner-events.js";
import { registerRunnerRoutes } from "./routes/runners.js";
import { registerScheduleRoutes } from "./routes/schedules.js";
import { registerStreamRoutes } from "./routes/streams.js";
import { registerTemplateRoutes } from "./routes/templates.js";
import { registerWellKnownRoutes } from "./routes/well-known.js";
import { withStore, type AppEnv } from "./app-env.js";

/**
 * The HTTP API: every route is declared with zod schemas, so its input is validated at the edge
 * and the OpenAPI document is generated from the same declarations.
 * The document is generated on the first GET /openapi.json, not at an isolate's start
 * (docs/architecture.md, "Cold start").
 */
export function createApp(): OpenAPIHono<AppEnv> {
  const app = new OpenAPIHono<AppEnv>({ defaultHook });
  app.onError(onError);
  app.notFound((c) => new Problem("no-route", `no route for ${c.req.method} ${c.req.path}`).toResponse(c.req.path));
  app.use("*", countRequests);
  app.use("*", limitHeaders);
  app.use("*", withStore);
  // Everything under /v1 is signed; operations, /openapi.json and /.well-known are public.
  app.use("/v1/*", authenticate);
  registerOperations(app);
  registerWellKnownRoutes(app);
  registerActorRoutes(app);
  registerContextRoutes(app);
  registerRunnerRoutes(app);
  registerFlowRoutes(app);
  // Job routes before the webhooks: `/jobs/{caller}/{id}/start` must not be read as a webhook.
  registerJobRoutes(app);
  registerRunnerEventRoutes(app);
  registerEventRoutes(app);
  registerMessageRoutes(app);
  registerRecoveryRoutes(app);
  registerScheduleRoutes(app);
  registerTemplateRoutes(app);
  registerStreamRoutes(app);
  registerRpc(app);
  app.openAPIRegistry.registerComponent("securitySchemes", "httpSignature", {
    type: "apiKey",
    in: "header",
    name: "Signature",
    description:
      'RFC 9421 HTTP Message Signature, Ed25519: label sig1 covering ("@method" "@target-uri" "content-digest"), with created, keyid (actor:<id>, runner:<context>:<id>, or key:<pubkey> to register), nonce and alg="ed25519"; Content-Digest (RFC 9530, sha-256) on every body.',
  });
  // Generated once per isolate, on the first request for it: the routes do not change after this.
  let document: ReturnType<typeof openApiDocument> | undefined;
  app.get("/openapi.json", (c) => c.json((document ??= openApiDocument(app))));
  return app;
}
