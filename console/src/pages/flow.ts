import type { FlowStreamEvent, FlowView, JobStatus } from "../../../shared/model/index.js";
import { describeError } from "../api.js";
import { DagView } from "../dag.js";
import { badge, fill, formatDuration, h, notify, timeElement } from "../dom.js";
import { checkFlowEvent, keepLive, liveIndicator } from "../live.js";
import { throttle, type PageContext, type PageHandle } from "../page.js";
import { href, type Route } from "../routes.js";
import { JobPanel } from "./job-panel.js";

/** A flow's actions, the statuses they apply to, and what the button says. */
const ACTIONS = [
  { action: "start", label: "Start", when: ["dispatched"] },
  { action: "cancel", label: "Cancel", when: ["dispatched", "started"] },
  { action: "rerun", label: "Re-run from failure", when: ["error"] },
] as const;

type Action = (typeof ACTIONS)[number]["action"];

const PROGRESS_ORDER: JobStatus[] = ["finished", "started", "dispatched", "waiting_for_prerequisites", "error"];

/**
 * One flow: its state and actions at the top, its DAG below with a node per job that changes
 * colour as the flow's events arrive, and the panel of the job chosen (by click, Enter, or the
 * URL's `/jobs/<id>`). Events are applied at once; the view is also read again at most once a
 * second after them, for what events do not carry (why a job waits). Without the event stream
 * the view is read every 2 s instead.
 */
export function flowPage(ctx: PageContext, contextId: number, flowId: number, jobId: number | undefined): PageHandle {
  const { api, main, signal } = ctx;
  const indicator = liveIndicator();
  const status = h("span", { "data-testid": "flow-status" });
  const meta = h("div", { class: "flow-meta" });
  const failure = h("div", {});
  const buttons = new Map<Action, HTMLButtonElement>();
  const graphArea = h("div", { class: "graph-area" }, h("p", { class: "muted" }, "Loading the flow…"));
  const base = `/v1/contexts/${contextId}/flows/${flowId}`;
  let view: FlowView | undefined;
  let dag: DagView | undefined;
  let wanted = jobId;

  const panel = new JobPanel(api, contextId, (closed) => {
    dag?.select(undefined);
    history.replaceState(null, "", href({ page: "flow", contextId, flowId }));
    dag?.focus(closed);
  });

  const openJob = (id: number | undefined) => {
    wanted = id;
    if (!view) return;
    dag?.select(id);
    if (id === undefined) panel.hide();
    else panel.show(view, id);
  };

  /** Draws what the view says: header, buttons, every node's colour, the open panel. */
  const apply = (next: FlowView, refreshPanel: boolean) => {
    view = next;
    fill(status, badge(next.status));
    drawMeta(meta, next);
    fill(
      failure,
      next.error
        ? h(
            "p",
            { class: "flow-error", role: "note" },
            next.error.job === 0 ? "Cancelled: " : `Job ${next.error.name ?? next.error.job} failed: `,
            next.error.reason,
          )
        : undefined,
    );
    for (const { action, when } of ACTIONS) {
      const button = buttons.get(action);
      if (button && !button.dataset.busy) button.disabled = !(when as readonly string[]).includes(next.status);
    }
    if (!dag) {
      dag = new DagView(next.jobs, (id) => {
        history.replaceState(null, "", href({ page: "flow", contextId, flowId, jobId: id }));
        openJob(id);
      });
      fill(graphArea, dag.element, panel.element);
      openJob(wanted);
    } else {
      for (const job of next.jobs) dag.update(job);
      if (refreshPanel && panel.current !== undefined) panel.show(next, panel.current);
    }
  };

  const reload = async () => {
    try {
      const next = await api.get<FlowView>(base);
      if (!signal.aborted) apply(next, true);
    } catch (error) {
      if (!signal.aborted) notify(`Cannot read flow ${flowId}: ${describeError(error)}`, "error");
    }
  };
  const resync = throttle(1_000, reload);

  /** An event, applied to the view at once: a job's node recolours, the flow's status changes. */
  const onEvent = (event: FlowStreamEvent) => {
    if (!view) return;
    if (event.job_id !== undefined) {
      const job = view.jobs.find((j) => j.id === event.job_id);
      if (job) {
        job.status = event.status as JobStatus;
        if (event.attempt !== undefined) job.attempt = event.attempt;
        if (event.runner_id !== undefined) job.runner_id = event.runner_id;
        dag?.update(job);
        if (event.type === "job.logs" && event.lines) panel.appendLogs(job.id, event.attempt, event.lines);
      }
    } else if (event.type.startsWith("flow.")) {
      view.status = event.status as FlowView["status"];
      apply(view, false);
    }
    if (event.type !== "job.logs" && event.type !== "job.heartbeat") resync();
  };

  const act = (action: Action, button: HTMLButtonElement) => {
    if (action === "cancel" && button.dataset.confirm !== "yes") {
      // Cancelling stops runners mid-job: the first press asks, the second one does it.
      button.dataset.confirm = "yes";
      button.textContent = "Press again to cancel";
      setTimeout(() => {
        delete button.dataset.confirm;
        button.textContent = "Cancel";
      }, 4_000);
      return;
    }
    button.dataset.busy = "yes";
    button.disabled = true;
    api
      .post<FlowView>(`${base}/${action}`, action === "cancel" ? { reason: "cancelled in the console" } : undefined)
      .then((next) => {
        delete button.dataset.busy;
        apply(next, true);
        notify(`Flow ${flowId}: ${action === "rerun" ? "re-run from its failed jobs" : `${action}ed`}`);
      })
      .catch((error: unknown) => {
        delete button.dataset.busy;
        if (view) apply(view, false);
        notify(`Cannot ${action} flow ${flowId}: ${describeError(error)}`, "error");
      });
  };
  for (const { action, label } of ACTIONS) {
    const button = h("button", { type: "button", disabled: true, "data-action": action }, label);
    button.addEventListener("click", () => act(action, button));
    buttons.set(action, button);
  }

  main.replaceChildren(
    h(
      "div",
      { class: "title-row" },
      h(
        "h1",
        {},
        h("a", { href: href({ page: "contexts" }), class: "crumb" }, "Contexts"),
        " / ",
        h("a", { href: href({ page: "flows", contextId }), class: "crumb" }, `Context ${contextId}`),
        ` / Flow ${flowId}`,
      ),
      status,
      indicator.element,
    ),
    meta,
    h("div", { class: "actions" }, ...buttons.values()),
    failure,
    graphArea,
  );

  void (async () => {
    let first: FlowView;
    try {
      first = await api.get<FlowView>(base);
    } catch (error) {
      fill(graphArea, h("p", { class: "form-error" }, `Cannot read flow ${flowId}: ${describeError(error)}`));
      indicator.set("stopped");
      return;
    }
    if (signal.aborted) return;
    apply(first, false);
    await keepLive({
      api,
      path: `${base}/events`,
      label: `the event stream of flow ${flowId}`,
      since: first.last_seq,
      check: checkFlowEvent,
      onEvent,
      reload,
      pollMs: 2_000,
      signal,
      indicator,
    });
  })();

  return {
    onRoute(route: Route) {
      if (route.page !== "flow" || route.contextId !== contextId || route.flowId !== flowId) return false;
      openJob(route.jobId);
      return true;
    },
  };
}

/** The flow's progress, times and trace id. */
function drawMeta(meta: HTMLElement, view: FlowView): void {
  const counts = PROGRESS_ORDER.filter((s) => view.progress[s] > 0).map((s) =>
    h("span", { class: `count st-${s}` }, `${view.progress[s]} ${s.replaceAll("_", " ")}`),
  );
  const ran =
    view.started_at === undefined
      ? "—"
      : formatDuration((view.ended_at ?? Math.floor(Date.now() / 1000)) - view.started_at);
  fill(
    meta,
    h("span", { class: "progress" }, `${view.progress.total} jobs: `, ...counts),
    h("span", {}, "started ", timeElement(view.started_at)),
    view.ended_at !== undefined ? h("span", {}, "ended ", timeElement(view.ended_at)) : undefined,
    h("span", {}, `ran ${ran}`),
    h("span", { class: "trace", title: "trace id (W3C traceparent)" }, `trace ${view.trace_id}`),
  );
}
