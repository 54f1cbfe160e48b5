import { z } from "zod";
import { TemplateFile } from "../../shared/flow/index.js";
import {
  FlowView,
  Id,
  TemplateName,
  TemplatePut,
  TemplateStart,
  TemplateSummary,
  TemplateVersion,
  TemplateView,
} from "../../shared/model/index.js";
import {
  deleteTemplate,
  listTemplates,
  loadTemplate,
  loadTemplateVersion,
  putTemplate,
  startTemplate,
} from "../service/templates.js";
import { lazyTable, method } from "./rpc-method.js";

/** JSON-RPC methods of flow templates (docs/templates.md), over the same service functions as their routes; built on first use. */
export const templateMethods = lazyTable(() => {
  const Named = z.object({ context_id: Id, name: TemplateName }).strict();
  return {
    "template.put": method({
      summary:
        "Store a flow file (with inputs) as a template's next version (admins); the same file as the latest makes none (created: false)",
      params: TemplateFile.safeExtend({ context_id: Id, name: TemplateName }),
      result: TemplatePut,
      alsoFails: [409],
      run: (call, { context_id, name, ...file }) => putTemplate(call, context_id, name, file),
    }),
    "template.list": method({
      summary: "List a context's templates by name, with their latest and oldest kept versions (readers)",
      params: z
        .object({ context_id: Id, offset: z.int().min(0).default(0), limit: z.int().min(1).max(500).default(50) })
        .strict(),
      result: z
        .object({ items: z.array(TemplateSummary), total: z.int().min(0), next: z.int().min(0).optional() })
        .strict()
        .meta({ id: "TemplatePage" }),
      run: (call, p) => listTemplates(call, p.context_id, p.offset, p.limit),
    }),
    "template.versions": method({
      summary: "A template with every version it keeps, newest first (readers)",
      params: Named,
      result: TemplateView,
      run: (call, p) => loadTemplate(call, p.context_id, p.name),
    }),
    "template.get": method({
      summary: "One version of a template with its file; the latest without a version (readers)",
      params: Named.safeExtend({ version: z.int().min(1).optional() }),
      result: TemplateVersion,
      run: (call, p) => loadTemplateVersion(call, p.context_id, p.name, p.version),
    }),
    "template.start": method({
      summary:
        "Start a flow from a template (admins): its version (default the latest), inputs checked against its declarations; a repeated idempotency_key answers the first flow",
      params: TemplateStart.safeExtend({
        context_id: Id,
        name: TemplateName,
        idempotency_key: z.string().min(1).max(128).optional(),
      }),
      result: FlowView,
      alsoFails: [409, 422],
      run: async (call, { context_id, name, idempotency_key, ...start }) =>
        (await startTemplate(call, context_id, name, start, idempotency_key)).view,
    }),
    "template.delete": method({
      summary: "Delete a template with every version (admins); idempotent",
      params: Named,
      result: z.object({ deleted: z.literal(true) }).strict(),
      run: async (call, p) => {
        await deleteTemplate(call, p.context_id, p.name);
        return { deleted: true as const };
      },
    }),
  };
});
