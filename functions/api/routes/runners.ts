import { createRoute, z, type OpenAPIHono } from "@hono/zod-openapi";
import { createRunner, deleteRunner, listRunners, loadRunner, updateRunner } from "../../service/runners.js";
import { flowCall, serviceCall } from "../call.js";
import { body, conflict, json, pageOf, PageQuery, PathId, schemas, signed, signedErrors } from "../schemas.js";
import type { AppEnv } from "../app-env.js";

const contextParams = z.object({ contextId: PathId });
const runnerParams = z.object({ contextId: PathId, runnerId: PathId });
const RunnerPage = pageOf(schemas.Runner, "RunnerPage");

const create = createRoute({
  method: "post",
  path: "/v1/contexts/{contextId}/runners",
  tags: ["runners"],
  summary: "Register a runner (admins)",
  security: signed,
  request: { params: contextParams, ...body(schemas.RunnerRegistration) },
  responses: { 201: json(schemas.Runner, "Registered"), ...signedErrors, ...conflict },
});

const list = createRoute({
  method: "get",
  path: "/v1/contexts/{contextId}/runners",
  tags: ["runners"],
  summary: "List runners (readers)",
  security: signed,
  request: { params: contextParams, query: PageQuery },
  responses: { 200: json(RunnerPage, "A page of runners"), ...signedErrors },
});

const load = createRoute({
  method: "get",
  path: "/v1/contexts/{contextId}/runners/{runnerId}",
  tags: ["runners"],
  summary: "Load a runner (readers, or the runner itself)",
  security: signed,
  request: { params: runnerParams },
  responses: { 200: json(schemas.RunnerWithDispatch, "The runner, and how dispatch stands with it"), ...signedErrors },
});

const update = createRoute({
  method: "patch",
  path: "/v1/contexts/{contextId}/runners/{runnerId}",
  tags: ["runners"],
  summary: "Change a runner (admins)",
  security: signed,
  request: { params: runnerParams, ...body(schemas.RunnerUpdate) },
  responses: { 200: json(schemas.Runner, "Updated"), ...signedErrors },
});

const remove = createRoute({
  method: "delete",
  path: "/v1/contexts/{contextId}/runners/{runnerId}",
  tags: ["runners"],
  summary: "Remove a runner (admins)",
  security: signed,
  request: { params: runnerParams },
  responses: { 204: { description: "Removed" }, ...signedErrors },
});

/** Runner routes of a context. */
export function registerRunnerRoutes(app: OpenAPIHono<AppEnv>): void {
  app.openapi(create, async (c) =>
    c.json(await createRunner(flowCall(c), c.req.valid("param").contextId, c.req.valid("json")), 201),
  );
  app.openapi(list, async (c) => {
    const { offset, limit } = c.req.valid("query");
    return c.json(await listRunners(serviceCall(c), c.req.valid("param").contextId, offset, limit), 200);
  });
  app.openapi(load, async (c) => {
    const { contextId, runnerId } = c.req.valid("param");
    return c.json(await loadRunner(serviceCall(c), contextId, runnerId), 200);
  });
  app.openapi(update, async (c) => {
    const { contextId, runnerId } = c.req.valid("param");
    return c.json(await updateRunner(flowCall(c), contextId, runnerId, c.req.valid("json")), 200);
  });
  app.openapi(remove, async (c) => {
    const { contextId, runnerId } = c.req.valid("param");
    await deleteRunner(flowCall(c), contextId, runnerId);
    return c.body(null, 204);
  });
}
