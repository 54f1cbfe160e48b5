import { createRoute, z, type OpenAPIHono } from "@hono/zod-openapi";
import { StorageUnavailableError } from "../../shared/store/index.js";
import { Problem } from "./problem.js";
import type { AppEnv } from "./store.js";

const HealthBody = z
  .object({
    status: z.literal("ok"),
    redis: z.object({ reachable: z.literal(true), latency_ms: z.number() }),
    time: z.string(),
  })
  .openapi("Health");

const ProblemBody = z
  .object({
    type: z.string(),
    title: z.string(),
    status: z.number(),
    detail: z.string().optional(),
  })
  .openapi("Problem");

const health = createRoute({
  method: "get",
  path: "/health",
  summary: "Liveness with a real storage round trip",
  tags: ["operations"],
  responses: {
    200: { description: "Redis answered", content: { "application/json": { schema: HealthBody } } },
    503: { description: "Redis is unreachable", content: { "application/problem+json": { schema: ProblemBody } } },
  },
});

/** `GET /health`: one PING through the storage client; 503 problem+json when it fails. */
export function registerHealth(app: OpenAPIHono<AppEnv>): void {
  app.openapi(health, async (c) => {
    try {
      const { latencyMs } = await c.var.store.ping();
      return c.json({ status: "ok" as const, redis: { reachable: true as const, latency_ms: latencyMs }, time: new Date().toISOString() }, 200);
    } catch (error) {
      if (error instanceof StorageUnavailableError) {
        throw new Problem(503, "storage-unavailable", "Storage unavailable", error.message, {
          redis: { reachable: false },
        });
      }
      throw error;
    }
  });
}
