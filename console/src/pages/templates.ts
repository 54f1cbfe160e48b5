import type {
  InputDeclaration,
  Page,
  TemplateSummary,
  TemplateVersion,
  TemplateView,
} from "../../../shared/model/index.js";
import { describeError } from "../api.js";
import { ageElement, fill, h, table, timeElement } from "../dom.js";
import type { PageContext } from "../page.js";
import { href } from "../routes.js";
import { contextHeader } from "./context-header.js";

/*
 * A context's flow templates (docs/templates.md): the list of templates with their versions, and
 * one template's versions with the inputs its latest declares. Read only: templates are put and
 * started with flowc or the API.
 */

/** The versions a template keeps, in words: "3" or "2 to 5". */
function kept(t: TemplateSummary): string {
  return t.oldest === t.latest ? String(t.latest) : `${t.oldest} to ${t.latest}`;
}

/** A context's templates by name: latest version, versions kept, last change, description. */
export function templatesPage(ctx: PageContext, contextId: number): void {
  const { api, main, signal } = ctx;
  const body = h("div", {}, h("p", { class: "muted" }, "Loading…"));
  main.replaceChildren(contextHeader(ctx, contextId, "templates"), body);
  const row = (t: TemplateSummary) =>
    h(
      "tr",
      { "data-template": t.name },
      h("td", {}, h("a", { href: href({ page: "template", contextId, name: t.name }) }, t.name)),
      h("td", { class: "num" }, String(t.latest)),
      h("td", {}, kept(t)),
      h("td", {}, ageElement(t.updated_at)),
      h("td", {}, t.description ?? ""),
    );
  api
    .get<Page<TemplateSummary>>(`/v1/contexts/${contextId}/templates?limit=500`)
    .then((page) => {
      if (signal.aborted) return;
      fill(
        body,
        page.items.length === 0
          ? h("p", {}, "No template in this context. ", h("code", {}, "flowc template put"), " stores one.")
          : table(["Template", "Latest", "Versions kept", "Updated", "Description"], page.items.map(row)),
      );
    })
    .catch((error: unknown) =>
      fill(body, h("p", { class: "form-error" }, `Cannot list templates: ${describeError(error)}`)),
    );
}

/** The inputs a version declares, as rows. */
function inputRows(version: TemplateVersion): HTMLTableRowElement[] {
  const inputs = (version.file.inputs ?? {}) as Record<string, InputDeclaration>;
  return Object.entries(inputs).map(([name, input]) =>
    h(
      "tr",
      {},
      h("td", {}, h("code", {}, name)),
      h("td", {}, input.type),
      h("td", {}, input.default !== undefined ? h("code", {}, JSON.stringify(input.default)) : "—"),
      h("td", {}, input.description ?? ""),
    ),
  );
}

/** One template: every version it keeps, newest first, and the inputs of the latest. */
export function templatePage(ctx: PageContext, contextId: number, name: string): void {
  const { api, main, signal } = ctx;
  const body = h("div", {}, h("p", { class: "muted" }, "Loading…"));
  const base = `/v1/contexts/${contextId}/templates/${encodeURIComponent(name)}`;
  main.replaceChildren(
    contextHeader(ctx, contextId, "templates"),
    h("h2", {}, h("a", { href: href({ page: "templates", contextId }) }, "Templates"), ` / ${name}`),
    body,
  );
  const versionRow = (v: TemplateView["versions"][number]) =>
    h(
      "tr",
      { "data-version": v.version },
      h("td", { class: "num" }, String(v.version)),
      h("td", {}, timeElement(v.created_at)),
      h("td", {}, `actor ${v.creator_id}`),
      h("td", { class: "num" }, String(v.jobs)),
      h("td", {}, v.inputs.join(", ") || "—"),
      h("td", {}, v.description ?? ""),
    );
  Promise.all([api.get<TemplateView>(base), api.get<TemplateVersion>(`${base}/versions/latest`)])
    .then(([template, latest]) => {
      if (signal.aborted) return;
      const inputs = inputRows(latest);
      fill(
        body,
        h("p", {}, template.description ?? "", template.description ? " · " : "", `${template.kept} versions kept`),
        h("h3", {}, `Inputs of version ${latest.version}`),
        inputs.length === 0
          ? h("p", { class: "muted" }, "It declares no inputs.")
          : table(["Input", "Type", "Default", "Description"], inputs),
        h("h3", {}, "Versions"),
        table(["Version", "Stored", "By", "Jobs", "Inputs", "Description"], template.versions.map(versionRow)),
      );
    })
    .catch((error: unknown) =>
      fill(body, h("p", { class: "form-error" }, `Cannot read template ${name}: ${describeError(error)}`)),
    );
}
