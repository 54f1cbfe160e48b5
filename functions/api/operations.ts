import { createRoute, z, type OpenAPIHono } from "@hono/zod-openapi";
import { KEY_DIRECTORY_PATH } from "../../shared/auth/index.js";
import { StorageUnavailableError } from "../../shared/store/index.js";
import { coordinatorKeys } from "../core/coordinator-key.js";
import { renderMetrics } from "./metrics.js";
import { Problem } from "../core/problem.js";
import { ProblemBody } from "./schemas.js";
import type { AppEnv } from "./app-env.js";

const VERSION = "0.1.0";

const HealthBody = z
  .object({
    status: z.literal("ok"),
    redis: z.object({ reachable: z.literal(true), latency_ms: z.number() }),
    time: z.string(),
  })
  .openapi("Health");
const ReadyBody = z
  .object({ ready: z.literal(true), redis: z.literal("reachable"), signing_key: z.string() })
  .openapi("Ready");
const InfoBody = z
  .object({
    name: z.string(),
    version: z.string(),
    api: z.string(),
    openapi: z.string(),
    openrpc: z.string(),
    rpc: z.string(),
    console: z.string(),
    docs: z.string(),
    key_directory: z.string(),
    actor_registration: z.string(),
    signature_skew_seconds: z.int(),
    key_prefix: z.string(),
  })
  .openapi("Info");

const unavailable = (description: string) => ({
  description,
  content: { "application/problem+json": { schema: ProblemBody } },
});

const health = createRoute({
  method: "get",
  path: "/health",
  summary: "Liveness with a real storage round trip",
  tags: ["operations"],
  responses: {
    200: { description: "Redis answered", content: { "application/json": { schema: HealthBody } } },
    503: unavailable("Redis is unreachable"),
  },
});

const ready = createRoute({
  method: "get",
  path: "/ready",
  summary: "Readiness: storage reachable and a signing key to deliver with",
  tags: ["operations"],
  responses: {
    200: { description: "Ready", content: { "application/json": { schema: ReadyBody } } },
    503: unavailable("Not ready: which part is missing"),
  },
});

const info = createRoute({
  method: "get",
  path: "/info",
  summary: "What this coordinator is and how it is set up (nothing secret)",
  tags: ["operations"],
  responses: { 200: { description: "Build and settings", content: { "application/json": { schema: InfoBody } } } },
});

const metrics = createRoute({
  method: "get",
  path: "/metrics",
  summary: "Prometheus metrics: this isolate's request counters, storage-wide gauges",
  tags: ["operations"],
  responses: {
    200: { description: "Prometheus text", content: { "text/plain": { schema: z.string() } } },
    503: unavailable("Redis is unreachable"),
  },
});

async function ping(c: { var: AppEnv["Variables"] }) {
  try {
    return await c.var.store.ping();
  } catch (error) {
    if (error instanceof StorageUnavailableError)
      throw new Problem("storage-unavailable", error.message, { redis: { reachable: false } });
    throw error;
  }
}

/** `/health`, `/ready`, `/info`, `/metrics`: unauthenticated operations endpoints. */
export function registerOperations(app: OpenAPIHono<AppEnv>): void {
  app.openapi(health, async (c) => {
    const { latencyMs } = await ping(c);
    return c.json(
      {
        status: "ok" as const,
        redis: { reachable: true as const, latency_ms: latencyMs },
        time: new Date().toISOString(),
      },
      200,
    );
  });
  app.openapi(ready, async (c) => {
    await ping(c);
    const keys = await coordinatorKeys(c.env);
    return c.json({ ready: true as const, redis: "reachable" as const, signing_key: keys.current.kid }, 200);
  });
  app.openapi(info, (c) =>
    c.json(
      {
        name: "flow-coordinator",
        version: VERSION,
        api: "/v1",
        openapi: "/openapi.json",
        openrpc: "/openrpc.json",
        rpc: "/rpc",
        console: "/console/",
        docs: "/docs/",
        key_directory: KEY_DIRECTORY_PATH,
        actor_registration: c.var.config.registration,
        signature_skew_seconds: c.var.config.skewSeconds,
        key_prefix: c.var.store.keys.prefix,
      },
      200,
    ),
  );
  app.openapi(metrics, async (c) => {
    // Storage away: toProblem answers 503 storage-unavailable.
    const { contexts, due } = await c.var.store.sweep.overview(Date.now());
    const text = renderMetrics({
      coordinator_contexts: { help: "Contexts in storage.", value: contexts },
      coordinator_contexts_due: { help: "Contexts with something due for the supervisor's sweep now.", value: due },
    });
    return c.text(text, 200, { "content-type": "text/plain; version=0.0.4" });
  });
}
