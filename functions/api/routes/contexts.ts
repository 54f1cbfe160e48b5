import { createRoute, z, type OpenAPIHono } from "@hono/zod-openapi";
import { PERMISSION_LISTS } from "../../../shared/auth/index.js";
import {
  createContext,
  deleteContext,
  grant,
  listContexts,
  loadContext,
  revoke,
  setLimits,
  setPermissions,
} from "../../service/contexts.js";
import { flowCall, serviceCall } from "../call.js";
import { body, conflict, json, PageQuery, PathId, schemas, signed, signedErrors } from "../schemas.js";
import type { AppEnv } from "../app-env.js";

const contextParams = z.object({ contextId: PathId });
const memberParams = z.object({ contextId: PathId, list: z.enum(PERMISSION_LISTS), actorId: PathId });

const create = createRoute({
  method: "post",
  path: "/v1/contexts",
  tags: ["contexts"],
  summary: "Create a context",
  description: "The creator becomes an admin. `id` is allocated unless given (409 when taken).",
  security: signed,
  request: body(schemas.ContextCreation),
  responses: { 201: json(schemas.Context, "Created"), ...signedErrors, ...conflict },
});

const ContextList = z.object({ items: z.array(schemas.Context), next: z.int().optional() }).openapi("ContextList");

const list = createRoute({
  method: "get",
  path: "/v1/contexts",
  tags: ["contexts"],
  summary: "List the contexts the caller is in (any permission list)",
  description:
    "Looks at `limit` contexts of the deployment from `offset` (in id order) and answers those the caller is an admin, reader or executor of: a page may hold fewer items than `limit`, even none, while `next` (the offset of the following window) says there are more to look at.",
  security: signed,
  request: { query: PageQuery },
  responses: { 200: json(ContextList, "The caller's contexts in this window"), ...signedErrors },
});

const load = createRoute({
  method: "get",
  path: "/v1/contexts/{contextId}",
  tags: ["contexts"],
  summary: "Load a context (admins, readers, executors)",
  security: signed,
  request: { params: contextParams },
  responses: { 200: json(schemas.Context, "The context"), ...signedErrors },
});

const replace = createRoute({
  method: "put",
  path: "/v1/contexts/{contextId}/permissions",
  tags: ["contexts"],
  summary: "Replace the permission lists (admins)",
  security: signed,
  request: { params: contextParams, ...body(schemas.PermissionsUpdate) },
  responses: { 200: json(schemas.Context, "Updated"), ...signedErrors },
});

const limits = createRoute({
  method: "put",
  path: "/v1/contexts/{contextId}/limits",
  tags: ["contexts"],
  summary: "Set the context's limits (admins)",
  description:
    "`max_inflight`: the most job attempts the context's runners hold at once, across all its flows and runners (dispatch waits below it). `flow_starts_per_minute`: the most flow starts a minute (a submission with `start` or a start past it is answered 429 `flow-starts-throttled` with `Retry-After`; all of a minute's starts may come at once). A number sets a limit, null lifts it, an absent one stays as it is.",
  security: signed,
  request: { params: contextParams, ...body(schemas.ContextLimitsUpdate) },
  responses: { 200: json(schemas.Context, "The context with its limits"), ...signedErrors },
});

const grantRoute = createRoute({
  method: "put",
  path: "/v1/contexts/{contextId}/permissions/{list}/{actorId}",
  tags: ["contexts"],
  summary: "Grant: add an actor to admins, readers or executors (admins)",
  security: signed,
  request: { params: memberParams },
  responses: { 200: json(schemas.Context, "Granted (or already so)"), ...signedErrors },
});

const revokeRoute = createRoute({
  method: "delete",
  path: "/v1/contexts/{contextId}/permissions/{list}/{actorId}",
  tags: ["contexts"],
  summary: "Revoke: remove an actor from a list (admins; never the last admin)",
  security: signed,
  request: { params: memberParams },
  responses: { 200: json(schemas.Context, "Revoked (or already so)"), ...signedErrors, ...conflict },
});

const remove = createRoute({
  method: "delete",
  path: "/v1/contexts/{contextId}",
  tags: ["contexts"],
  summary: "Delete a context with everything in it (admins)",
  security: signed,
  request: { params: contextParams },
  responses: { 204: { description: "Deleted" }, ...signedErrors },
});

/** Context routes: create, list, load, permissions, delete. */
export function registerContextRoutes(app: OpenAPIHono<AppEnv>): void {
  app.openapi(create, async (c) => c.json(await createContext(serviceCall(c), c.req.valid("json")), 201));
  app.openapi(list, async (c) => {
    const { offset, limit } = c.req.valid("query");
    return c.json(await listContexts(serviceCall(c), offset, limit), 200);
  });
  app.openapi(load, async (c) => c.json(await loadContext(serviceCall(c), c.req.valid("param").contextId), 200));
  app.openapi(replace, async (c) =>
    c.json(await setPermissions(serviceCall(c), c.req.valid("param").contextId, c.req.valid("json")), 200),
  );
  app.openapi(limits, async (c) =>
    c.json(await setLimits(flowCall(c), c.req.valid("param").contextId, c.req.valid("json")), 200),
  );
  app.openapi(grantRoute, async (c) => {
    const { contextId, list, actorId } = c.req.valid("param");
    return c.json(await grant(serviceCall(c), contextId, list, actorId), 200);
  });
  app.openapi(revokeRoute, async (c) => {
    const { contextId, list, actorId } = c.req.valid("param");
    return c.json(await revoke(serviceCall(c), contextId, list, actorId), 200);
  });
  app.openapi(remove, async (c) => {
    await deleteContext(serviceCall(c), c.req.valid("param").contextId);
    return c.body(null, 204);
  });
}
