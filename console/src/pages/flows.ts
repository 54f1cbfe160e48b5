import type { Flow, Page } from "../../../shared/model/index.js";
import { describeError } from "../api.js";
import { ageElement, badge, durationElement, h, table, timeElement } from "../dom.js";
import { checkContextEvent, keepLive, liveIndicator } from "../live.js";
import { throttle, type PageContext } from "../page.js";
import { href } from "../routes.js";
import { contextHeader } from "./context-header.js";

const PAGE = 50;
const STATUSES = [
  { value: "", label: "every status" },
  { value: "dispatched", label: "created, not started" },
  { value: "started", label: "running" },
  { value: "finished", label: "finished" },
  { value: "error", label: "error" },
  { value: "compensating", label: "unwinding (compensating)" },
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
 * A context's flows, newest first, optionally of one status; kept current by the context's event
 * stream (each event reloads the list, at most once a second), or by reading it every 5 s when
 * the coordinator has no stream.
 */
export function flowsPage(ctx: PageContext, contextId: number, status: string | undefined): void {
  const { api, main, signal } = ctx;
  const indicator = liveIndicator();
  const body = h("div", {}, h("p", { class: "muted" }, "Loading…"));
  const older = h("button", { type: "button", hidden: true }, "Older flows");
  /** How many flows are shown, counting back from the newest. */
  let shown = PAGE;
  const filter = `${status ? `&status=${status}` : ""}`;

  const load = async () => {
    try {
      // The index lists flows oldest first: the last `shown` of them are the newest.
      const { total } = await api.get<Page<Flow>>(`/v1/contexts/${contextId}/flows?limit=1${filter}`);
      const offset = Math.max(0, total - shown);
      const page = await api.get<Page<Flow>>(
        `/v1/contexts/${contextId}/flows?offset=${offset}&limit=${Math.min(500, shown)}${filter}`,
      );
      if (signal.aborted) return;
      const flows = page.items.reverse();
      older.hidden = offset === 0;
      body.replaceChildren(
        flows.length === 0
          ? h("p", {}, status ? `No flow is ${status} in this context.` : "No flow in this context yet.")
          : table(
              ["Flow", "Status", "Jobs", "Created", "Started", "Duration", "Error"],
              flows.map((flow) => flowRow(contextId, flow)),
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

  const select = statusFilter(contextId, status);
  main.replaceChildren(
    contextHeader(ctx, contextId, "flows"),
    h("div", { class: "toolbar" }, h("label", { for: "status-filter" }, "Show"), select, indicator.element),
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

/** A flow's row in the list: its link, status, size, times and why it failed. */
function flowRow(contextId: number, flow: Flow): HTMLTableRowElement {
  // Job 0 is the flow itself (a cancel, its deadline): its reason says what happened.
  const error = !flow.error
    ? ""
    : flow.error.job === 0
      ? flow.error.reason
      : `${flow.error.name ?? `job ${flow.error.job}`}: ${flow.error.reason}`;
  return h(
    "tr",
    { "data-flow": flow.id },
    h("td", {}, h("a", { href: href({ page: "flow", contextId, flowId: flow.id }) }, `Flow ${flow.id}`)),
    h("td", {}, badge(flow.status)),
    h("td", { class: "num" }, String(flow.jobs.length)),
    h("td", {}, ageElement(flow.created_at)),
    h("td", {}, timeElement(flow.started_at)),
    h("td", {}, flowDuration(flow)),
    h("td", { class: "reason" }, error),
  );
}

/** The status filter: choosing one opens the list of that status. */
function statusFilter(contextId: number, status: string | undefined): HTMLSelectElement {
  const select = h(
    "select",
    { id: "status-filter" },
    ...STATUSES.map(({ value, label }) =>
      h("option", { value, ...(value === (status ?? "") ? { selected: true } : {}) }, label),
    ),
  );
  select.addEventListener("change", () => {
    location.hash = href({ page: "flows", contextId, ...(select.value ? { status: select.value } : {}) });
  });
  return select;
}
