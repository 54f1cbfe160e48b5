import { createRoute, z, type OpenAPIHono } from "@hono/zod-openapi";
import { FlowSubmission } from "../../../shared/flow/index.js";
import { FlowDag } from "../../../shared/model/index.js";
import { FILTER_WINDOW } from "../../../shared/store/index.js";
import { flowDag, listFlows, loadFlow, startFlow, submitFlow } from "../../service/flows.js";
import { deleteFlow } from "../../service/retention.js";
import { flowCall } from "../call.js";
import {
  body,
  conflict,
  FlowListFilters,
  flowListQuery,
  IdempotencyHeader,
  idempotencyReused,
  json,
  pageOf,
  PageQuery,
  PathId,
  schemas,
  signed,
  signedErrors,
  statusConflict,
  throttled,
} from "../schemas.js";
import type { AppEnv } from "../app-env.js";

const contextParams = z.object({ contextId: PathId });
const flowParams = z.object({ contextId: PathId, flowId: PathId });
const FlowPage = pageOf(schemas.Flow, "FlowPage");

const submit = createRoute({
  method: "post",
  path: "/v1/contexts/{contextId}/flows",
  tags: ["flows"],
  summary: "Submit a flow (admins)",
  description:
    "A DAG of jobs, stored all or nothing; refused with 400 naming the job for a cycle, an unknown dependency, a duplicate id or name, a limit, or an unknown pinned runner. `start: true` starts it at once. A repeated `Idempotency-Key` answers 200 with the first flow.",
  security: signed,
  request: {
    params: contextParams,
    headers: IdempotencyHeader,
    ...body(FlowSubmission),
  },
  responses: {
    201: json(schemas.FlowView, "Created"),
    200: json(
      schemas.FlowView,
      "The flow this Idempotency-Key created before (finished now if the first request's answer was lost)",
    ),
    ...signedErrors,
    ...conflict,
    ...idempotencyReused,
    ...throttled,
  },
});

const list = createRoute({
  method: "get",
  path: "/v1/contexts/{contextId}/flows",
  tags: ["flows"],
  summary: "List flows, optionally by status, name and labels (readers)",
  description: `By id, oldest first (\`order=newest\`: newest first); \`status\` lists one status's own index. With \`name\` or \`label\`, a page looks through at most ${FILTER_WINDOW} flows of that index from \`offset\` and holds those that match (up to \`limit\`): it may hold fewer, even none, while \`next\` says where the next page goes on. \`total\` counts the flows of the index looked through. Each flow has its \`progress\`: a running flow's live.`,
  security: signed,
  request: { params: contextParams, query: PageQuery.extend(FlowListFilters) },
  responses: { 200: json(FlowPage, "A page of flows"), ...signedErrors },
});

const load = createRoute({
  method: "get",
  path: "/v1/contexts/{contextId}/flows/{flowId}",
  tags: ["flows"],
  summary: "Load a flow with every job's live status (readers)",
  security: signed,
  request: { params: flowParams },
  responses: { 200: json(schemas.FlowView, "The flow"), ...signedErrors },
});

const dag = createRoute({
  method: "get",
  path: "/v1/contexts/{contextId}/flows/{flowId}/dag",
  tags: ["flows"],
  summary: "The flow's DAG: nodes with statuses, edges dependency → dependent (readers)",
  security: signed,
  request: { params: flowParams },
  responses: { 200: json(FlowDag, "The DAG"), ...signedErrors },
});

const remove = createRoute({
  method: "delete",
  path: "/v1/contexts/{contextId}/flows/{flowId}",
  tags: ["flows"],
  summary: "Delete an ended flow now, with everything it owns (admins)",
  description:
    "Removes the flow's record, its jobs, their attempts' messages and logs, its result message (also from the caller's inbox), its index entries and its Durable Object's storage (its event stream). Only a flow that ended (finished, error, compensated or compensation_failed) with none of its jobs still running can be deleted: otherwise 409 `conflict` naming its `flow_status` (cancel it first: that stops the attempts a failed flow still has in flight). Its child flows go with it (each with its own children; a child deleted before is fine): one still running is a 409 naming `child_flow_id` (the children that ended until then are deleted; ask again once it ended). A flow that does not exist, or was deleted before, is 404. Dead letters of its jobs stay (they are capped and deleted on their own). Retention does the same by itself once the context's window for how the flow ended has passed.",
  security: signed,
  request: { params: flowParams },
  responses: { 204: { description: "Deleted" }, ...signedErrors, ...statusConflict },
});

const start = createRoute({
  method: "post",
  path: "/v1/contexts/{contextId}/flows/{flowId}/start",
  tags: ["flows"],
  summary: "Start a flow (admins); starting it again changes nothing",
  security: signed,
  request: { params: flowParams },
  responses: { 200: json(schemas.FlowView, "Started"), ...signedErrors, ...throttled },
});

/** Flow routes: submit, list, load, DAG, start, delete. */
export function registerFlowRoutes(app: OpenAPIHono<AppEnv>): void {
  app.openapi(submit, async (c) => {
    const { view, created } = await submitFlow(
      flowCall(c),
      c.req.valid("param").contextId,
      c.req.valid("json"),
      c.req.valid("header")["idempotency-key"],
      c.var.deferredNonce,
    );
    return created ? c.json(view, 201) : c.json(view, 200);
  });
  app.openapi(list, async (c) => {
    const query = flowListQuery(c.req.valid("query"));
    return c.json(await listFlows(flowCall(c), c.req.valid("param").contextId, query), 200);
  });
  app.openapi(load, async (c) => {
    const { contextId, flowId } = c.req.valid("param");
    return c.json(await loadFlow(flowCall(c), contextId, flowId), 200);
  });
  app.openapi(dag, async (c) => {
    const { contextId, flowId } = c.req.valid("param");
    return c.json(await flowDag(flowCall(c), contextId, flowId), 200);
  });
  app.openapi(start, async (c) => {
    const { contextId, flowId } = c.req.valid("param");
    return c.json(await startFlow(flowCall(c), contextId, flowId), 200);
  });
  app.openapi(remove, async (c) => {
    const { contextId, flowId } = c.req.valid("param");
    await deleteFlow(flowCall(c), contextId, flowId);
    return c.body(null, 204);
  });
}
