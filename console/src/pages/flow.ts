import type { FlowStreamEvent, FlowView } from "../../../shared/model/index.js";
import { describeError } from "../api.js";
import { fill, h, notify } from "../dom.js";
import { checkFlowEvent, keepLive, liveIndicator } from "../live.js";
import { throttle, type PageContext, type PageHandle } from "../page.js";
import { href, type Route } from "../routes.js";
import { addJoined, applyFlowEvent, applyJobEvent, Unread } from "./flow-events.js";
import { drawMeta, failureNote, statusBadge } from "./flow-header.js";
import { FlowViews } from "./flow-views.js";
import { JobPanel } from "./job-panel.js";

/** A flow's actions, the statuses they apply to, and what the button says. */
const ACTIONS = [
  { action: "start", label: "Start", when: ["dispatched"] },
  { action: "cancel", label: "Cancel", when: ["dispatched", "started", "compensating"] },
  { action: "compensate", label: "Cancel and compensate", when: ["dispatched", "started"] },
  { action: "rerun", label: "Re-run from failure", when: ["error", "compensation_failed"] },
] as const;

type Action = (typeof ACTIONS)[number]["action"];

/** At most this many events of a flow's history are read for its timeline (a flow of 10,000 jobs has some 50,000). */
const HISTORY_MAX = 100_000;

/**
 * One flow: its state and actions at the top, its jobs below (a DAG whose nodes change colour
 * as the flow's events arrive, a timeline of their attempts, a table: flow-views.ts), and the
 * panel of the job chosen (by click, Enter, or the URL's `/jobs/<id>`). Events are applied at
 * once; the view is also read again at most once a second after them, for what events do not
 * carry (why a job waits), and brought up to the events seen since it was read (flow-events.ts,
 * `Unread`). Without the event stream the view is read every 2 s instead.
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
  private readonly views: FlowViews;
  private readonly resync: () => void;
  private readonly unread = new Unread();
  private view: FlowView | undefined;
  /** The last event of the flow's history the first view knew: the timeline reads up to it. */
  private historyUntil = 0;

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
        this.views.select(undefined);
        history.replaceState(null, "", href({ page: "flow", contextId, flowId }));
        this.views.focus(closed);
      },
      (jobId) => this.rerunFrom(jobId),
    );
    this.views = new FlowViews(
      (id) => {
        history.replaceState(null, "", href({ page: "flow", contextId, flowId, jobId: id }));
        this.openJob(id);
      },
      () => void this.readHistory(),
    );
    this.resync = throttle(1_000, () => this.reload());
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
    this.historyUntil = first.last_seq ?? 0;
    fill(this.graphArea, this.views.element, this.panel.element);
    this.apply(first, false);
    this.openJob(this.wanted);
    // Running jobs' times tick, running bars grow, countdowns count down.
    const clock = setInterval(() => this.views.tick(), 1_000);
    signal.addEventListener("abort", () => clearInterval(clock), { once: true });
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

  /**
   * The flow's history, for its timeline: its stream from the first event up to the one the first
   * view knew (those after it came live). Every earlier attempt of every job is in it.
   */
  private async readHistory(): Promise<void> {
    const until = this.historyUntil;
    if (until === 0) return;
    const stop = new AbortController();
    const signal = AbortSignal.any([this.ctx.signal, stop.signal]);
    let read = 0;
    try {
      const label = `the history of flow ${this.flowId}`;
      for await (const event of this.ctx.api.follow(`${this.base}/events`, checkFlowEvent, { label, signal })) {
        this.views.event(event);
        if (event.seq >= until || ++read >= HISTORY_MAX) break;
      }
    } catch {
      // The timeline keeps what the view and the live events told of each job's latest attempt.
    } finally {
      stop.abort();
    }
  }

  openJob(id: number | undefined): void {
    this.wanted = id;
    if (!this.view) return;
    this.views.select(id);
    if (id === undefined) this.panel.hide();
    else this.panel.show(this.view, id);
  }

  /**
   * Draws a view read from the coordinator (or an action's answer), once brought up to the
   * events seen since it was read: header, buttons, the jobs, the open panel.
   */
  private apply(next: FlowView, refreshPanel: boolean): void {
    this.unread.catchUp(next);
    this.view = next;
    this.drawTop(next);
    this.views.show(next);
    if (refreshPanel && this.panel.current !== undefined) this.panel.show(next, this.panel.current);
  }

  /** The header, the buttons and why the flow failed: all from the view as it is now. */
  private drawTop(view: FlowView): void {
    fill(this.status, statusBadge(view));
    drawMeta(this.meta, view);
    fill(this.failure, failureNote(view));
    // Compensating is offered only to a flow with compensations.
    const unwinds = view.jobs.some((j) => j.compensates !== undefined);
    for (const { action, when } of ACTIONS) {
      const button = this.buttons.get(action);
      if (!button) continue;
      button.hidden = action === "compensate" && !unwinds;
      if (!button.dataset.busy) button.disabled = !(when as readonly string[]).includes(view.status);
    }
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

  /**
   * An event, applied to the view at once (unless the view has it already): a job's node, its
   * row and bar, and the header's counts move together; a flow's event moves the header.
   */
  private onEvent(event: FlowStreamEvent): void {
    this.views.event(event);
    const view = this.view;
    if (!view || event.seq <= (view.last_seq ?? 0)) return;
    this.unread.keep(event);
    view.last_seq = event.seq;
    if (event.type === "job.added") {
      if (addJoined(view, event)) {
        this.views.grew();
        drawMeta(this.meta, view);
      }
    } else if (event.job_id !== undefined) {
      const job = view.jobs.find((j) => j.id === event.job_id);
      if (job) {
        const was = [job.status, job.attempt, job.error].join();
        applyJobEvent(job, event);
        this.views.update(job);
        if (event.type === "job.logs" && event.lines) this.panel.appendLogs(job.id, event.attempt, event.lines);
        else if (event.type !== "job.heartbeat" && this.panel.current === job.id) this.panel.show(view, job.id);
        if ([job.status, job.attempt, job.error].join() !== was) drawMeta(this.meta, view);
      }
    } else if (event.type.startsWith("flow.")) {
      applyFlowEvent(view, event);
      this.drawTop(view);
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
