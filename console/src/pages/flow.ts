import type { FlowStreamEvent, FlowView, JobStatus, JobView } from "../../../shared/model/index.js";
import { progressCount } from "../../../shared/model/progress.js";
import { describeError } from "../api.js";
import { COUNTDOWN_MS, DagView } from "../dag.js";
import { badge, fill, formatDuration, h, notify, timeElement } from "../dom.js";
import { checkFlowEvent, keepLive, liveIndicator } from "../live.js";
import { throttle, type PageContext, type PageHandle } from "../page.js";
import { href, type Route } from "../routes.js";
import { addJoined, applyJobEvent } from "./flow-events.js";
import { JobPanel } from "./job-panel.js";

/** A flow's actions, the statuses they apply to, and what the button says. */
const ACTIONS = [
  { action: "start", label: "Start", when: ["dispatched"] },
  { action: "cancel", label: "Cancel", when: ["dispatched", "started", "compensating"] },
  { action: "compensate", label: "Cancel and compensate", when: ["dispatched", "started"] },
  { action: "rerun", label: "Re-run from failure", when: ["error", "compensation_failed"] },
] as const;

/** The statuses a flow ends in. */
const FLOW_ENDED: ReadonlySet<string> = new Set(["finished", "error", "compensated", "compensation_failed"]);

type Action = (typeof ACTIONS)[number]["action"];

const PROGRESS_ORDER: JobStatus[] = [
  "finished",
  "started",
  "dispatched",
  "waiting_for_prerequisites",
  "error",
  "skipped",
];

/** How many jobs are in each status, counted from the jobs themselves (after events moved them). */
function progressOf(jobs: JobView[]): FlowView["progress"] {
  return progressCount(jobs.map((job) => job.status));
}

/**
 * One flow: its state and actions at the top, its DAG below with a node per job that changes
 * colour as the flow's events arrive, and the panel of the job chosen (by click, Enter, or the
 * URL's `/jobs/<id>`). Events are applied at once; the view is also read again at most once a
 * second after them, for what events do not carry (why a job waits). Without the event stream
 * the view is read every 2 s instead.
 */
export function flowPage(ctx: PageContext, contextId: number, flowId: number, jobId: number | undefined): PageHandle {
  const page = new FlowPage(ctx, contextId, flowId, jobId);
  void page.follow();
  return {
    onRoute(route: Route) {
      if (route.page !== "flow" || route.contextId !== contextId || route.flowId !== flowId) return false;
      page.openJob(route.jobId);
      return true;
    },
  };
}

/** The flow page's elements and what it knows of the flow. */
class FlowPage {
  private readonly indicator = liveIndicator();
  private readonly status = h("span", { "data-testid": "flow-status" });
  private readonly meta = h("div", { class: "flow-meta" });
  private readonly failure = h("div", {});
  private readonly buttons = new Map<Action, HTMLButtonElement>();
  private readonly graphArea = h("div", { class: "graph-area" }, h("p", { class: "muted" }, "Loading the flow…"));
  private readonly base: string;
  private readonly panel: JobPanel;
  private readonly resync: () => void;
  /** Draws the graph again with the jobs that joined the flow (at most every 300 ms while many join). */
  private readonly regrow: () => void;
  private view: FlowView | undefined;
  private dag: DagView | undefined;

  constructor(
    private readonly ctx: PageContext,
    private readonly contextId: number,
    private readonly flowId: number,
    /** The job whose panel is (to be) open. */
    private wanted: number | undefined,
  ) {
    this.base = `/v1/contexts/${contextId}/flows/${flowId}`;
    this.panel = new JobPanel(
      ctx.api,
      contextId,
      (closed) => {
        this.dag?.select(undefined);
        history.replaceState(null, "", href({ page: "flow", contextId, flowId }));
        this.dag?.focus(closed);
      },
      (jobId) => this.rerunFrom(jobId),
    );
    this.resync = throttle(1_000, () => this.reload());
    this.regrow = throttle(300, async () => this.draw());
    for (const { action, label } of ACTIONS) {
      const button = h("button", { type: "button", disabled: true, "data-action": action }, label);
      button.addEventListener("click", () => this.act(action, button));
      this.buttons.set(action, button);
    }
    this.layOut();
  }

  private layOut(): void {
    const { contextId, flowId } = this;
    const crumbs = h(
      "h1",
      {},
      h("a", { href: href({ page: "contexts" }), class: "crumb" }, "Contexts"),
      " / ",
      h("a", { href: href({ page: "flows", contextId }), class: "crumb" }, `Context ${contextId}`),
      ` / Flow ${flowId}`,
    );
    this.ctx.main.replaceChildren(
      h("div", { class: "title-row" }, crumbs, this.status, this.indicator.element),
      this.meta,
      h("div", { class: "actions" }, ...this.buttons.values()),
      this.failure,
      this.graphArea,
    );
  }

  /** Reads the flow, then follows its event stream (or polls) until the page goes. */
  async follow(): Promise<void> {
    const { api, signal } = this.ctx;
    let first: FlowView;
    try {
      first = await api.get<FlowView>(this.base);
    } catch (error) {
      fill(this.graphArea, h("p", { class: "form-error" }, `Cannot read flow ${this.flowId}: ${describeError(error)}`));
      this.indicator.set("stopped");
      return;
    }
    if (signal.aborted) return;
    this.apply(first, false);
    // A wait's or a sleep's time left counts down on its node.
    const countdown = setInterval(() => this.dag?.tick(), COUNTDOWN_MS);
    signal.addEventListener("abort", () => clearInterval(countdown), { once: true });
    await keepLive({
      api,
      path: `${this.base}/events`,
      label: `the event stream of flow ${this.flowId}`,
      since: first.last_seq,
      check: checkFlowEvent,
      onEvent: (event) => this.onEvent(event),
      reload: () => this.reload(),
      pollMs: 2_000,
      signal,
      indicator: this.indicator,
    });
  }

  openJob(id: number | undefined): void {
    this.wanted = id;
    if (!this.view) return;
    this.dag?.select(id);
    if (id === undefined) this.panel.hide();
    else this.panel.show(this.view, id);
  }

  /** Draws what the view says: header, buttons, every node's colour, the open panel. */
  private apply(next: FlowView, refreshPanel: boolean): void {
    this.view = next;
    fill(this.status, badge(next.status));
    drawMeta(this.meta, next);
    fill(this.failure, next.error ? failureNote(next.error) : undefined);
    // Compensating is offered only to a flow with compensations.
    const unwinds = next.jobs.some((j) => j.compensates !== undefined);
    for (const { action, when } of ACTIONS) {
      const button = this.buttons.get(action);
      if (!button) continue;
      button.hidden = action === "compensate" && !unwinds;
      if (!button.dataset.busy) button.disabled = !(when as readonly string[]).includes(next.status);
    }
    const dag = this.dag;
    if (dag && next.jobs.every((job) => dag.has(job.id))) {
      for (const job of next.jobs) dag.update(job);
      if (refreshPanel && this.panel.current !== undefined) this.panel.show(next, this.panel.current);
      return;
    }
    this.draw();
  }

  /**
   * Lays the graph out and draws it: at first, and again when jobs joined the flow (a map's
   * instances, jobs a result added), at the zoom it had, with the same job chosen.
   */
  private draw(): void {
    const view = this.view;
    if (!view) return;
    const { contextId, flowId } = this;
    this.dag = new DagView(
      view.jobs,
      (id) => {
        history.replaceState(null, "", href({ page: "flow", contextId, flowId, jobId: id }));
        this.openJob(id);
      },
      this.dag?.zoomed,
    );
    fill(this.graphArea, this.dag.element, this.panel.element);
    this.openJob(this.wanted ?? this.panel.current);
  }

  /** A job joined the flow (`job.added`): into the view (flow-events.ts), and into the graph soon. */
  private joined(view: FlowView, event: FlowStreamEvent): void {
    if (!addJoined(view, event)) return;
    view.progress = progressOf(view.jobs);
    drawMeta(this.meta, view);
    this.regrow();
  }

  private async reload(): Promise<void> {
    const { api, signal } = this.ctx;
    try {
      const next = await api.get<FlowView>(this.base);
      if (!signal.aborted) this.apply(next, true);
    } catch (error) {
      if (!signal.aborted) notify(`Cannot read flow ${this.flowId}: ${describeError(error)}`, "error");
    }
  }

  /** An event, applied to the view at once: a job's node recolours, the flow's status changes. */
  private onEvent(event: FlowStreamEvent): void {
    const view = this.view;
    if (!view) return;
    if (event.type === "job.added") this.joined(view, event);
    else if (event.job_id !== undefined) {
      const job = view.jobs.find((j) => j.id === event.job_id);
      if (job) {
        const was = job.status;
        applyJobEvent(job, event);
        this.dag?.update(job);
        if (event.type === "job.logs" && event.lines) this.panel.appendLogs(job.id, event.attempt, event.lines);
        else if (event.type !== "job.heartbeat" && this.panel.current === job.id) this.panel.show(view, job.id);
        if (job.status !== was) {
          view.progress = progressOf(view.jobs);
          drawMeta(this.meta, view);
        }
      }
    } else if (event.type.startsWith("flow.")) {
      view.status = event.status as FlowView["status"];
      const at = Math.floor(event.at_ms / 1000);
      if (event.type === "flow.started" || event.type === "flow.rerun") delete view.ended_at;
      if (event.run !== undefined) view.run = event.run;
      if (event.type === "flow.started") view.started_at ??= at;
      if (event.type === "flow.compensating") view.compensating_at ??= at;
      if (FLOW_ENDED.has(view.status)) view.ended_at ??= at;
      this.apply(view, false);
    }
    if (event.type !== "job.logs" && event.type !== "job.heartbeat") this.resync();
  }

  /**
   * Re-runs the flow from a job (its panel's button): the job and everything downstream of it,
   * naming the run the page shows, so a second press (or another's re-run first) is refused.
   */
  private rerunFrom(jobId: number): void {
    const view = this.view;
    if (!view) return;
    const key = view.jobs.find((j) => j.id === jobId)?.key ?? String(jobId);
    this.ctx.api
      .post<FlowView>(`${this.base}/rerun`, { from: jobId, run: view.run })
      .then((next) => {
        this.apply(next, true);
        notify(`Flow ${this.flowId}: run ${next.run} from ${key}`);
      })
      .catch((error: unknown) => {
        if (this.view) this.panel.redraw(this.view);
        notify(`Cannot re-run flow ${this.flowId} from ${key}: ${describeError(error)}`, "error");
      });
  }

  /** A button pressed: the action asked of the coordinator (a cancel asks to be pressed twice). */
  private act(action: Action, button: HTMLButtonElement): void {
    const cancels = action === "cancel" || action === "compensate";
    if (cancels && button.dataset.confirm !== "yes") {
      // Cancelling stops runners mid-job: the first press asks, the second one does it.
      const label = button.textContent;
      button.dataset.confirm = "yes";
      button.textContent = "Press again to cancel";
      setTimeout(() => {
        delete button.dataset.confirm;
        button.textContent = label;
      }, 4_000);
      return;
    }
    button.dataset.busy = "yes";
    button.disabled = true;
    const body = cancels
      ? { reason: "cancelled in the console", ...(action === "compensate" ? { compensate: true } : {}) }
      : undefined;
    const done = { start: "started", cancel: "cancelled", compensate: "unwinds", rerun: "re-run from its failed jobs" };
    this.ctx.api
      .post<FlowView>(`${this.base}/${cancels ? "cancel" : action}`, body)
      .then((next) => {
        delete button.dataset.busy;
        this.apply(next, true);
        notify(`Flow ${this.flowId}: ${done[action]}`);
      })
      .catch((error: unknown) => {
        delete button.dataset.busy;
        if (this.view) this.apply(this.view, false);
        notify(`Cannot ${action} flow ${this.flowId}: ${describeError(error)}`, "error");
      });
  }
}

/** Why the flow failed: the job at fault and its reason, or that it was cancelled; the compensations that failed. */
function failureNote(error: NonNullable<FlowView["error"]>): HTMLElement {
  // Job 0 is the flow itself: its reason says what happened ("cancelled: …", its deadline).
  const who = error.job === 0 ? "" : `Job ${error.name ?? error.job} failed: `;
  const failed = error.failed_compensations?.length
    ? ` Compensations that failed: ${error.failed_compensations.join(", ")} (re-run runs them again).`
    : "";
  return h("p", { class: "flow-error", role: "note" }, who, error.reason, failed);
}

/** The flow's progress, times, trace id, and the template it was started from. */
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
    view.compensating_at !== undefined
      ? h("span", {}, "unwinding since ", timeElement(view.compensating_at))
      : undefined,
    view.ended_at !== undefined ? h("span", {}, "ended ", timeElement(view.ended_at)) : undefined,
    h("span", {}, `ran ${ran}`),
    view.run > 1
      ? h("span", { "data-testid": "flow-run", title: "re-run: each re-run is the next run" }, `run ${view.run}`)
      : undefined,
    h("span", { class: "trace", title: "trace id (W3C traceparent)" }, `trace ${view.trace_id}`),
    view.template
      ? h(
          "span",
          { "data-testid": "flow-template" },
          "from template ",
          h(
            "a",
            { href: href({ page: "template", contextId: view.context_id, name: view.template.name }) },
            view.template.name,
          ),
          ` version ${view.template.version}`,
        )
      : undefined,
    view.parent
      ? h(
          "span",
          { "data-testid": "flow-parent" },
          "child of ",
          h(
            "a",
            {
              href: href({
                page: "flow",
                contextId: view.context_id,
                flowId: view.parent.flow_id,
                jobId: view.parent.job_id,
              }),
            },
            `flow ${view.parent.flow_id}`,
          ),
          ` (job ${view.parent.job_id})`,
        )
      : undefined,
  );
}
