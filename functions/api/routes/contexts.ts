import { createRoute, z, type OpenAPIHono } from "@hono/zod-openapi";
import { PERMISSION_LISTS } from "../../../shared/auth/index.js";
import { createContext, grant, listContexts, revoke, setLimits, setPermissions } from "../../service/contexts.js";
import { contextDetails, deleteContext, setRetention } from "../../service/retention.js";
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

const DeletionUnderWay = z.object({ context_id: z.int(), status: z.literal("deleting") }).openapi("ContextDeletion");

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
  summary: "Load a context with its retention and what it stores (admins, readers, executors)",
  description:
    "The context's record, `retention_in_force` (its own `retention` settings over the deployment's defaults; `overridden` names the parts it sets itself) and `stored`: what it holds, counted from its indexes (flows by status, ended flows and jobs waiting for their retention window, jobs, messages between actors, unread inbox messages, dead letters, runners, schedules).",
  security: signed,
  request: { params: contextParams },
  responses: { 200: json(schemas.ContextDetails, "The context"), ...signedErrors },
});

const retention = createRoute({
  method: "put",
  path: "/v1/contexts/{contextId}/retention",
  tags: ["contexts"],
  summary: "Set the context's retention (admins)",
  description:
    "How long a flow (or a job outside any flow) is kept after it `finished`, or ended in `error` (then it is removed with its jobs, messages, logs and its Durable Object's storage), how long a message may wait unread in an inbox (a read one is removed as it is read), and the most `dead_letters` kept (the oldest are dropped first). A number sets a part, null goes back to the deployment's default (wrangler.toml `RETENTION_*`, `DEAD_LETTERS_MAX`), an absent part stays. The supervisor's sweep removes what is due, a bounded batch per context a minute; a running flow is never removed.",
  security: signed,
  request: { params: contextParams, ...body(schemas.RetentionUpdate) },
  responses: { 200: json(schemas.ContextDetails, "The context with its retention"), ...signedErrors },
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
  description:
    "The context is gone for every caller at once (404 from then on); its runners, schedules, flows, jobs, messages, dead letters and every Durable Object's storage of it are removed in bounded steps. 204 when all was removed within this request; 202 when the rest goes on in the background (the supervisor's sweep carries it on, a step a minute, and survives interruption). Asking again while it is under way goes on with it; once it is done the context is 404.",
  security: signed,
  request: { params: contextParams },
  responses: {
    204: { description: "Deleted" },
    202: json(DeletionUnderWay, "Being deleted: the sweep goes on with it"),
    ...signedErrors,
  },
});

/** Context routes: create, list, load, permissions, delete. */
export function registerContextRoutes(app: OpenAPIHono<AppEnv>): void {
  app.openapi(create, async (c) => c.json(await createContext(flowCall(c), c.req.valid("json")), 201));
  app.openapi(list, async (c) => {
    const { offset, limit } = c.req.valid("query");
    return c.json(await listContexts(serviceCall(c), offset, limit), 200);
  });
  app.openapi(load, async (c) => c.json(await contextDetails(serviceCall(c), c.req.valid("param").contextId), 200));
  app.openapi(retention, async (c) =>
    c.json(await setRetention(flowCall(c), c.req.valid("param").contextId, c.req.valid("json")), 200),
  );
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
    const contextId = c.req.valid("param").contextId;
    if (await deleteContext(flowCall(c), contextId)) return c.body(null, 204);
    return c.json({ context_id: contextId, status: "deleting" as const }, 202);
  });
}
