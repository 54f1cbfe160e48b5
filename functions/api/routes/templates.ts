import { createRoute, z, type OpenAPIHono } from "@hono/zod-openapi";
import { TemplateFile } from "../../../shared/flow/index.js";
import {
  TEMPLATE_LIMITS,
  TemplateName,
  TemplatePut,
  TemplateStart,
  TemplateSummary,
  TemplateVersion,
  TemplateView,
} from "../../../shared/model/index.js";
import {
  deleteTemplate,
  listTemplates,
  loadTemplate,
  loadTemplateVersion,
  putTemplate,
  startTemplate,
} from "../../service/templates.js";
import { flowCall } from "../call.js";
import {
  body,
  conflict,
  IdempotencyHeader,
  idempotencyReused,
  json,
  pageOf,
  PageQuery,
  PathId,
  problem,
  schemas,
  signed,
  signedErrors,
  throttled,
} from "../schemas.js";
import type { AppEnv } from "../app-env.js";

const contextParams = z.object({ contextId: PathId });
const templateParams = z.object({ contextId: PathId, name: TemplateName });
const versionParams = templateParams.extend({
  version: z
    .string()
    .regex(/^(latest|[1-9]\d{0,9})$/, "a version number, or latest")
    .openapi({ description: "A version number, or `latest`" }),
});
const TemplatePage = pageOf(TemplateSummary, "TemplatePage");

const put = createRoute({
  method: "put",
  path: "/v1/contexts/{contextId}/templates/{name}",
  tags: ["templates"],
  summary: "Store a flow file as the template's next version (admins)",
  description: [
    "The body is a flow file without `id` and `start`, with `inputs` declared (`{name: {type: string|number|boolean|json, default?, description?, required?}}`) and an optional `description`; its jobs take no `id`. It is checked as a flow submission is (400 naming the field), and every `${inputs.x}` (in a wait's key, a `sleep_until`, an `env_vars` value) and `inputs.x` (in a `when`) must name a declared input.",
    "Versions are numbered from 1 and never change once written; a number is never given twice under one name. A PUT of the same file as the latest version makes no new one: it answers that version, 200 with `created: false` (so a PUT repeated after a lost answer is harmless).",
    `Limits: ${TEMPLATE_LIMITS.perContext} templates per context (one more name is refused, 409); ${TEMPLATE_LIMITS.versionsKept} versions kept per template (a PUT past it drops the oldest); ${TEMPLATE_LIMITS.inputs} inputs; the body as any request's (1 MiB).`,
  ].join("\n\n"),
  security: signed,
  request: { params: templateParams, ...body(TemplateFile) },
  responses: {
    201: json(TemplatePut, "A new version"),
    200: json(TemplatePut, "The file is the latest version's: no new version (`created: false`)"),
    ...signedErrors,
    409: problem(`The context holds ${TEMPLATE_LIMITS.perContext} templates, the most it may: delete one first`),
  },
});

const list = createRoute({
  method: "get",
  path: "/v1/contexts/{contextId}/templates",
  tags: ["templates"],
  summary: "List a context's templates by name, with their latest and oldest kept versions (readers)",
  security: signed,
  request: { params: contextParams, query: PageQuery },
  responses: { 200: json(TemplatePage, "A page of templates"), ...signedErrors },
});

const load = createRoute({
  method: "get",
  path: "/v1/contexts/{contextId}/templates/{name}",
  tags: ["templates"],
  summary: "Load a template with every version it keeps, newest first (readers)",
  security: signed,
  request: { params: templateParams },
  responses: { 200: json(TemplateView, "The template and its versions"), ...signedErrors },
});

const version = createRoute({
  method: "get",
  path: "/v1/contexts/{contextId}/templates/{name}/versions/{version}",
  tags: ["templates"],
  summary: "Load one version of a template with its file, or the latest (readers)",
  description: "404 for a template that does not exist, or a version it does not keep (dropped, or not made yet).",
  security: signed,
  request: { params: versionParams },
  responses: { 200: json(TemplateVersion, "The version"), ...signedErrors },
});

const remove = createRoute({
  method: "delete",
  path: "/v1/contexts/{contextId}/templates/{name}",
  tags: ["templates"],
  summary: "Delete a template with every version (admins); idempotent",
  description:
    "Flows started from it are not touched; a schedule that names it fails its next fire, saying so. Its version numbers are not given again: a template put again under the name goes on from the last one.",
  security: signed,
  request: { params: templateParams },
  responses: { 204: { description: "Deleted (or already gone)" }, ...signedErrors },
});

const start = createRoute({
  method: "post",
  path: "/v1/contexts/{contextId}/templates/{name}/flows",
  tags: ["templates"],
  summary: "Start a flow from a template (admins)",
  description: [
    "The version asked for (default: the latest), with `inputs` checked against its declarations: an input it does not declare, a value of the wrong type, or a required one missing is a 400 naming `body.inputs.<name>`; defaults fill in the rest. Each input becomes the flow's variable `INPUT_<NAME>`, and the template's `${inputs.x}` are rewritten (docs/templates.md). The flow then goes the way of a submission: the same checks, limits and throttle, `start` (default true). Its record and view keep `template: {name, version}`.",
    "A repeated `Idempotency-Key` answers 200 with the first flow (the key's digest covers the name, the version as asked, the inputs and `start`; with no version given, a retry answers the flow the first try made, from the version that was the latest then).",
  ].join("\n\n"),
  security: signed,
  request: { params: templateParams, headers: IdempotencyHeader, ...body(TemplateStart) },
  responses: {
    201: json(schemas.FlowView, "Created (and started, unless `start: false`)"),
    200: json(schemas.FlowView, "The flow this Idempotency-Key created before"),
    ...signedErrors,
    ...conflict,
    ...idempotencyReused,
    ...throttled,
  },
});

/** Template routes of a context: put, list, load, a version, delete, start a flow. */
export function registerTemplateRoutes(app: OpenAPIHono<AppEnv>): void {
  app.openapi(put, async (c) => {
    const { contextId, name } = c.req.valid("param");
    const answer = await putTemplate(flowCall(c), contextId, name, c.req.valid("json"));
    return answer.created ? c.json(answer, 201) : c.json(answer, 200);
  });
  app.openapi(list, async (c) => {
    const { offset, limit } = c.req.valid("query");
    return c.json(await listTemplates(flowCall(c), c.req.valid("param").contextId, offset, limit), 200);
  });
  app.openapi(load, async (c) => {
    const { contextId, name } = c.req.valid("param");
    return c.json(await loadTemplate(flowCall(c), contextId, name), 200);
  });
  app.openapi(version, async (c) => {
    const { contextId, name, version: asked } = c.req.valid("param");
    const number = asked === "latest" ? undefined : Number(asked);
    return c.json(await loadTemplateVersion(flowCall(c), contextId, name, number), 200);
  });
  app.openapi(remove, async (c) => {
    const { contextId, name } = c.req.valid("param");
    await deleteTemplate(flowCall(c), contextId, name);
    return c.body(null, 204);
  });
  app.openapi(start, async (c) => {
    const { contextId, name } = c.req.valid("param");
    const { view, created } = await startTemplate(
      flowCall(c),
      contextId,
      name,
      c.req.valid("json"),
      c.req.valid("header")["idempotency-key"],
      c.var.deferredNonce,
    );
    return created ? c.json(view, 201) : c.json(view, 200);
  });
}
