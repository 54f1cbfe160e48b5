import type { FlowStreamEvent, FlowView, JobView } from "../../../shared/model/index.js";
import { DagView } from "../dag.js";
import { fill, h } from "../dom.js";
import { JobGrid } from "../job-grid.js";
import { throttle } from "../page.js";
import { TimelineView } from "../timeline.js";
import { Attempts } from "../timeline-model.js";

/**
 * The three ways the flow page shows a flow's jobs, as tabs: the DAG (dag.ts), the timeline
 * (timeline.ts, a Gantt chart of every attempt) and the jobs table (job-grid.ts). A flow of more
 * than `BIG_FLOW` jobs opens on the table (a graph of hundreds of nodes is an overview, not
 * something to read); a smaller one on the DAG, fitted to the screen's width. All three are
 * told every change; the one not shown is drawn when it is shown, the timeline and the table at
 * most four times a second while it is.
 */

export type ViewName = "dag" | "timeline" | "jobs";

/** Flows with more jobs than this open on the jobs table. */
export const BIG_FLOW = 100;

const TABS: { name: ViewName; label: string }[] = [
  { name: "dag", label: "DAG" },
  { name: "timeline", label: "Timeline" },
  { name: "jobs", label: "Jobs" },
];

export class FlowViews {
  readonly element: HTMLElement;
  readonly attempts = new Attempts();
  private readonly tabs = new Map<ViewName, HTMLButtonElement>();
  private readonly panel = h("div", { id: "flow-view", role: "tabpanel", class: "flow-view" });
  private readonly timeline: TimelineView;
  private readonly grid: JobGrid;
  /** The graph, laid out only while it is shown (dagre takes seconds over a graph of thousands). */
  private dag: DagView | undefined;
  /** The zoom of the last graph drawn, kept when it is laid out again. */
  private zoom: number | undefined;
  private historyAsked = false;
  private active: ViewName | undefined;
  private view: FlowView | undefined;
  private selected: number | undefined;
  /** What changed since the timeline and the table were last drawn. */
  private stale = { timeline: true, jobs: true };
  private readonly redraw: () => void;
  /** Lays the graph out again with the jobs that joined the flow (at most every 300 ms while many join). */
  private readonly regrow: () => void;

  constructor(
    private readonly onSelect: (jobId: number) => void,
    /** Asked once, the first time the timeline is shown: read the flow's history into `attempts`. */
    private readonly onTimeline: () => void,
  ) {
    this.timeline = new TimelineView(onSelect);
    this.grid = new JobGrid(onSelect);
    this.redraw = throttle(250, async () => this.drawShown());
    this.regrow = throttle(300, async () => this.layOut());
    const list = h("div", { class: "view-tabs", role: "tablist", "aria-label": "How the jobs are shown" });
    for (const { name, label } of TABS) {
      const tab = h(
        "button",
        { type: "button", role: "tab", "aria-controls": "flow-view", "aria-selected": "false", "data-view": name },
        label,
      );
      tab.addEventListener("click", () => this.showTab(name));
      this.tabs.set(name, tab);
      list.append(tab);
    }
    this.element = h("div", { class: "flow-views" }, list, this.panel);
  }

  /** The view of the flow changed as a whole (first read, read again, an action's answer). */
  show(view: FlowView): void {
    this.view = view;
    this.attempts.seed(view);
    const jobs = this.tabs.get("jobs");
    if (jobs) jobs.textContent = `Jobs (${view.jobs.length})`;
    if (this.active === undefined) this.showTab(view.jobs.length > BIG_FLOW ? "jobs" : "dag");
    const dag = this.dag;
    if (dag && view.jobs.every((job) => dag.has(job.id))) for (const job of view.jobs) dag.update(job);
    else this.layOut();
    this.changed();
  }

  /** A job moved (an event): its node at once, the timeline and the table soon. */
  update(job: JobView): void {
    this.dag?.update(job);
    this.changed();
  }

  /** An event of the flow's stream, live or from its history: the timeline's attempts. */
  event(event: FlowStreamEvent): void {
    if (this.attempts.apply(event)) {
      this.stale.timeline = true;
      if (this.active === "timeline") this.redraw();
    }
  }

  /** Jobs joined the flow: the graph is laid out again with them, soon. */
  grew(): void {
    this.regrow();
    this.changed();
  }

  /** Every second: running jobs' times and bars. */
  tick(): void {
    if (this.active === "dag") this.dag?.tick();
    if (this.active === "timeline") this.timeline.tick();
  }

  /** Marks the job whose panel is open, in every view. */
  select(jobId: number | undefined): void {
    this.selected = jobId;
    this.dag?.select(jobId);
    this.timeline.select(jobId);
    this.grid.select(jobId);
  }

  /** Gives the keyboard focus back to the job (after its panel closed), where it is shown. */
  focus(jobId: number): void {
    if (this.active === "dag") this.dag?.focus(jobId);
    else this.panel.querySelector<HTMLElement>(`[data-job="${jobId}"] button`)?.focus();
  }

  private changed(): void {
    this.stale = { timeline: true, jobs: true };
    if (this.active !== "dag") this.redraw();
  }

  /**
   * Lays the graph out and draws it, if it is shown (else it is laid out when it is): at first,
   * and again when jobs joined, at the zoom it had.
   */
  private layOut(): void {
    const view = this.view;
    if (this.dag) this.zoom = this.dag.zoomed;
    this.dag = undefined;
    if (!view || this.active !== "dag") return;
    this.dag = new DagView(view.jobs, this.onSelect, this.zoom);
    this.dag.select(this.selected);
    fill(this.panel, this.dag.element);
    this.dag.fitOnce();
  }

  private showTab(name: ViewName): void {
    this.active = name;
    for (const [tab, button] of this.tabs) button.setAttribute("aria-selected", String(tab === name));
    if (name === "timeline" && !this.historyAsked) {
      this.historyAsked = true;
      this.onTimeline();
    }
    if (name === "dag") {
      if (!this.dag) this.layOut();
      else {
        fill(this.panel, this.dag.element);
        this.dag.fitOnce();
      }
      return;
    }
    fill(this.panel, name === "timeline" ? this.timeline.element : this.grid.element);
    this.drawShown();
  }

  /** Draws the timeline or the table, whichever is shown, if it changed since it was drawn. */
  private drawShown(): void {
    const view = this.view;
    if (!view) return;
    if (this.active === "timeline" && this.stale.timeline) {
      this.stale.timeline = false;
      this.timeline.draw(view, this.attempts);
      this.timeline.select(this.selected);
    } else if (this.active === "jobs" && this.stale.jobs) {
      this.stale.jobs = false;
      this.grid.draw(view);
    }
  }
}
