import type { Flow, Page } from "../../../shared/model/index.js";
import { flowTrigger, labelsText, triggerText } from "../../../shared/model/flow-identity.js";
import { plainClass, plainFlowStatus, type PlainWords } from "../../../shared/model/plain-status.js";
import { describeError } from "../api.js";
import { ageElement, durationElement, h, table } from "../dom.js";
import { checkContextEvent, keepLive, liveIndicator } from "../live.js";
import { throttle, type PageContext } from "../page.js";
import { href, type FlowFilters } from "../routes.js";
import { contextHeader } from "./context-header.js";

const PAGE = 50;
/**
 * A filtered page looks through at most 200 flows (docs/api.md, "Listing flows"): a list of 50
 * more matches reads at most this many pages for them before it offers to look further.
 */
const WINDOWS_PER_PAGE = 5;
/** The statuses a list may show, in plain words (the API's names in the query). */
const STATUSES = [
  { value: "", label: "every status" },
  { value: "dispatched", label: "created" },
  { value: "started", label: "running" },
  { value: "finished", label: "finished" },
  { value: "error", label: "failed or cancelled" },
  { value: "compensating", label: "compensating" },
  { value: "compensated", label: "compensated" },
  { value: "compensation_failed", label: "compensation failed" },
];

/**
 * How long a flow ran, or, still running, has been running: a duration that ticks (dom.ts), so a
 * running flow's row does not freeze at the time the list was read.
 */
export function flowDuration(flow: Pick<Flow, "started_at" | "ended_at">): HTMLElement {
  // The list's flows keep whole seconds: one that ended within its start's second took "< 1 s".
  if (flow.started_at !== undefined && flow.ended_at === flow.started_at) return h("span", { class: "took" }, "< 1 s");
  const ended = flow.ended_at === undefined ? undefined : flow.ended_at * 1000;
  return durationElement(flow.started_at === undefined ? undefined : flow.started_at * 1000, ended);
}

/**
 * A context's flows, newest first: each with its name and labels, its status in plain words,
 * what started it, its priority and progress; narrowed by status, a part of the name and labels
 * (the route's filters, so a filtered list can be bookmarked). Kept current by the context's
 * event stream (each event reloads the list, at most once a second), or by reading it every 5 s
 * when the coordinator has no stream.
 */
export function flowsPage(ctx: PageContext, contextId: number, filters: FlowFilters): void {
  const { api, main, signal } = ctx;
  const indicator = liveIndicator();
  const body = h("div", {}, h("p", { class: "muted" }, "Loading…"));
  const older = h("button", { type: "button", hidden: true }, "Older flows");
  /** How many flows are shown, counting back from the newest. */
  let shown = PAGE;
  const filtered = Boolean(filters.name || filters.labels?.length);

  const load = async () => {
    try {
      const { flows, next } = await readFlows(ctx, contextId, filters, shown);
      if (signal.aborted) return;
      older.hidden = next === undefined;
      older.textContent = filtered ? "Look through older flows" : "Older flows";
      body.replaceChildren(
        flows.length === 0
          ? h("p", {}, emptyText(filters, next !== undefined))
          : table(
              ["Flow", "Name", "Status", "Trigger", "Priority", "Progress", "Created", "Duration", "Why"],
              flows.map((flow) => flowRow(contextId, flow, filters)),
            ),
      );
    } catch (error) {
      body.replaceChildren(h("p", { class: "form-error" }, `Cannot list flows: ${describeError(error)}`));
    }
  };
  older.addEventListener("click", () => {
    shown = Math.min(500, shown + PAGE);
    void load();
  });

  main.replaceChildren(
    contextHeader(ctx, contextId, "flows"),
    filterForm(contextId, filters, indicator.element),
    body,
    older,
  );
  void load().then(() => {
    const reload = throttle(1_000, load);
    return keepLive({
      api,
      path: `/v1/contexts/${contextId}/events`,
      label: `the event stream of context ${contextId}`,
      since: undefined,
      check: checkContextEvent,
      onEvent: reload,
      reload: load,
      reloadOnOpen: true,
      pollMs: 5_000,
      signal,
      indicator,
    });
  });
}

/**
 * The newest `shown` flows that pass the filters, and where the list goes on (undefined: it
 * ends). A filtered page may hold fewer flows than asked while more may match further back: it
 * reads on, a bounded number of pages.
 */
async function readFlows(
  { api }: PageContext,
  contextId: number,
  filters: FlowFilters,
  shown: number,
): Promise<{ flows: Flow[]; next: number | undefined }> {
  const flows: Flow[] = [];
  let next: number | undefined = 0;
  for (let read = 0; next !== undefined && flows.length < shown && read < (WINDOWS_PER_PAGE * shown) / PAGE; read++) {
    const query = new URLSearchParams({ order: "newest", offset: String(next), limit: String(shown - flows.length) });
    if (filters.status) query.set("status", filters.status);
    if (filters.name) query.set("name", filters.name);
    for (const label of filters.labels ?? []) query.append("label", label);
    const page: Page<Flow> = await api.get<Page<Flow>>(`/v1/contexts/${contextId}/flows?${query}`);
    flows.push(...page.items);
    next = page.next;
  }
  return { flows, next };
}

/** Why the list is empty, in words. */
function emptyText(filters: FlowFilters, more: boolean): string {
  if (filters.name || filters.labels?.length)
    return more ? "No flow matches among the newest flows." : "No flow matches these filters.";
  if (filters.status)
    return `No flow is ${STATUSES.find((s) => s.value === filters.status)?.label ?? filters.status} in this context.`;
  return "No flow in this context yet.";
}

/** A flow's status as a badge: its plain word, coloured as its API status is, why in its title. */
function statusBadge(flow: Flow, words: PlainWords): HTMLElement {
  return h(
    "span",
    {
      class: `badge st-${flow.status} plain-${plainClass(words.word)}`,
      "data-status": flow.status,
      ...(words.why ? { title: words.why } : {}),
    },
    words.word,
  );
}

/** How far a flow is: a bar and `3/4` (jobs ended of its jobs); `—` when the list does not know. */
function progressCell(flow: Flow): HTMLElement {
  const p = flow.progress;
  if (!p) return h("td", { class: "num" }, "—");
  const ended = p.finished + p.error + p.skipped;
  const label = `${ended} of ${p.total} jobs ended`;
  return h(
    "td",
    { class: "progress-cell", title: label },
    h("progress", { max: String(Math.max(1, p.total)), value: String(ended), "aria-label": label }),
    h("span", { class: "num" }, `${ended}/${p.total}`),
  );
}

/** What started a flow: a parent flow links to it, the rest is said. */
function triggerCell(contextId: number, flow: Flow): HTMLElement {
  const trigger = flowTrigger(flow);
  if (trigger.kind === "parent")
    return h(
      "td",
      {},
      h("a", { href: href({ page: "flow", contextId, flowId: trigger.flow_id }) }, triggerText(trigger)),
    );
  return h("td", { class: trigger.kind === "manual" ? "muted" : "" }, triggerText(trigger));
}

/** A flow's name, and its labels as links that narrow the list to them. */
function nameCell(contextId: number, flow: Flow, filters: FlowFilters): HTMLElement {
  const labels = Object.entries(flow.labels ?? {}).sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
  const chips = labels.map(([key, value]) => {
    const label = `${key}:${value}`;
    const all = [...new Set([...(filters.labels ?? []), label])];
    const link = href({ page: "flows", contextId, ...filters, labels: all });
    return h("a", { class: "label-chip", href: link, title: `only flows labelled ${key}=${value}` }, `${key}=${value}`);
  });
  return h(
    "td",
    { class: "flow-name" },
    flow.name !== undefined ? h("span", {}, flow.name) : h("span", { class: "muted" }, "—"),
    chips.length > 0
      ? h("span", { class: "labels", "aria-label": `labels ${labelsText(flow.labels)}` }, ...chips)
      : undefined,
  );
}

/** Why a flow did not finish, in words: the job at fault, or a cancel's reason (without the word again). */
function whyText(flow: Flow, words: PlainWords): string {
  if (!flow.error) return "";
  if (flow.error.job === 0)
    return words.word === "cancelled" ? flow.error.reason.replace(/^cancelled:?\s*/, "") : flow.error.reason;
  return `${flow.error.name ?? `job ${flow.error.job}`} failed: ${flow.error.reason}`;
}

/** A flow's row in the list. */
function flowRow(contextId: number, flow: Flow, filters: FlowFilters): HTMLTableRowElement {
  const words = plainFlowStatus({ status: flow.status, ...(flow.error ? { error: flow.error } : {}) });
  return h(
    "tr",
    { "data-flow": flow.id },
    h("td", {}, h("a", { href: href({ page: "flow", contextId, flowId: flow.id }) }, `Flow ${flow.id}`)),
    nameCell(contextId, flow, filters),
    h("td", {}, statusBadge(flow, words)),
    triggerCell(contextId, flow),
    h("td", { class: "num" }, String(flow.priority ?? 0)),
    progressCell(flow),
    h("td", {}, ageElement(flow.created_at)),
    h("td", {}, flowDuration(flow)),
    h("td", { class: "reason" }, whyText(flow, words)),
  );
}

/**
 * The filters: a status, a part of the name, labels (`key:value` or `key`, several apart by
 * spaces). Applying them opens the list they name (its address keeps them).
 */
function filterForm(contextId: number, filters: FlowFilters, live: HTMLElement): HTMLElement {
  const status = h(
    "select",
    { id: "status-filter" },
    ...STATUSES.map(({ value, label }) =>
      h("option", { value, ...(value === (filters.status ?? "") ? { selected: true } : {}) }, label),
    ),
  );
  const name = h("input", {
    id: "name-filter",
    type: "search",
    placeholder: "a part of the name",
    value: filters.name ?? "",
  });
  const labels = h("input", {
    id: "label-filter",
    type: "search",
    placeholder: "key:value …",
    value: (filters.labels ?? []).join(" "),
  });
  const form = h(
    "form",
    { class: "toolbar filters", role: "search", "aria-label": "filter flows" },
    h("label", { for: "status-filter" }, "Status"),
    status,
    h("label", { for: "name-filter" }, "Name"),
    name,
    h("label", { for: "label-filter" }, "Labels"),
    labels,
    h("button", { type: "submit" }, "Filter"),
    filters.status || filters.name || filters.labels?.length
      ? h("a", { href: href({ page: "flows", contextId }), class: "clear" }, "Clear")
      : undefined,
    live,
  );
  const apply = () => {
    const chosen: FlowFilters = {
      ...(status.value ? { status: status.value } : {}),
      ...(name.value.trim() ? { name: name.value.trim() } : {}),
      labels: labels.value.split(/\s+/).filter(Boolean),
    };
    location.hash = href({ page: "flows", contextId, ...chosen });
  };
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    apply();
  });
  // A status chosen applies at once, as it did before there were other filters.
  status.addEventListener("change", apply);
  return form;
}
