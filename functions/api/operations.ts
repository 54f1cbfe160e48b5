import { createRoute, z, type OpenAPIHono } from "@hono/zod-openapi";
import { KEY_DIRECTORY_PATH } from "../../shared/auth/index.js";
import { StorageUnavailableError } from "../../shared/store/index.js";
import { publicOrigin } from "../core/config.js";
import { coordinatorKeys } from "../core/coordinator-key.js";
import { readFigures } from "../service/figures.js";
import { checkScraper, renderMetrics } from "./metrics.js";
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
  summary:
    "Prometheus metrics: figures read from storage (the same from every isolate), and this isolate's own counters",
  description:
    "Flows by status, jobs waiting, in flight and dead-lettered per context, runners' in-flight counts, dispatch " +
    "latency and job duration histograms, jobs ended and retried, deliveries refused, sweeps: all read from storage, " +
    "so any isolate answers alike. Series named `coordinator_isolate_…` are the answering isolate's own. Reports on " +
    "the 1,000 contexts with the lowest ids (`coordinator_metrics_contexts_omitted` counts the others). The figures " +
    "may be up to METRICS_CACHE_SECONDS (60) old: within that window a scrape answers the last reading kept in " +
    "storage (`coordinator_metrics_taken_timestamp_seconds` says when it was read). " +
    "Send `Authorization: Bearer <METRICS_TOKEN>`; without METRICS_TOKEN set, it answers only in local development (ALLOW_INSECURE_HTTP).",
  tags: ["operations"],
  responses: {
    200: { description: "Prometheus text", content: { "text/plain": { schema: z.string() } } },
    403: unavailable("No METRICS_TOKEN sent (or none set outside local development)"),
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
    checkScraper(c.var.config, c.req.header("authorization"));
    // Storage away: toProblem answers 503 storage-unavailable.
    const origin = publicOrigin(c.env) || new URL(c.req.url).origin;
    const text = renderMetrics(await readFigures(c.env, c.var.store, origin, c.var.config.metricsCacheSeconds));
    return c.text(text, 200, { "content-type": "text/plain; version=0.0.4" });
  });
}
