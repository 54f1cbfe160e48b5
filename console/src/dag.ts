import { Graph, layout } from "@dagrejs/dagre";
import { h, svg } from "./dom.js";
import { ariaLabel, linesOf, nodeClass, nodeOf, NODE_H, NODE_W, sizeOf, type DagJob } from "./dag-node.js";
import { timeText, tooltip } from "./job-text.js";

export { type DagJob } from "./dag-node.js";

/** Below this window width (px) the graph is laid out top to bottom (a phone held upright). */
const NARROW = 600;

/**
 * A flow's DAG as an SVG: laid out left to right in layers by dagre (each job after the jobs it
 * depends on), an arrow per dependency, a node per job coloured by its plain status (a class, with the
 * status written under the name too). Live updates recolour nodes in place, never lay the graph
 * out again, so nothing jumps while a flow runs, unless the flow grows: jobs that join it (a
 * map's instances, jobs a result added) make its page draw a new graph with them (flow-views.ts).
 * The graph fits its viewport's width when first shown (top to bottom on a narrow screen), in a
 * scrolling viewport with zoom buttons (and Ctrl + wheel), "fit" and 1:1. Each node says how long
 * its job ran, or has been running (`tick`, every second).
 *
 * A job that runs no script has its own shape and a badge: a wait is a hexagon (⏸ wait), a
 * sleep a pill (☾ sleep). Those, and jobs with rules of their own (`when`, `needs`,
 * `allow_failure`: a ⚑ marker), are a line taller: what the wait waits for and how long it has
 * left, until when the sleep sleeps, the rule, or why the job was skipped. A skipped job is
 * drawn dashed and grey. A compensation (it undoes a job if the flow unwinds) has a ↩ undo badge
 * and a dashed outline of its own colour, and a dashed arc from the job it undoes: the flow's
 * unwinding reads left to right after its run. A map is a stacked box (⧉ map) with a dashed arrow to each of its
 * instances, which are framed together behind a dashed box labelled with the map's name.
 */

/**
 * The jobs laid out left to right by dagre: a node per job, an edge per dependency, and one
 * from a map to each of its instances (so they sit after it).
 */
function laidOut(jobs: DagJob[], rankdir: "LR" | "TB"): Graph {
  const graph = new Graph();
  // A small edge separation: dagre routes every edge through a point between the layers, and
  // with the default (20) a densely connected flow grows many times taller than its nodes.
  // Room above the nodes for a map's frame and its label (groupsOf), when there is one.
  const marginy = jobs.some((job) => job.map_of !== undefined) ? 30 : 12;
  graph.setGraph({ rankdir, nodesep: 14, edgesep: 4, ranksep: rankdir === "LR" ? 56 : 36, marginx: 12, marginy });
  graph.setDefaultEdgeLabel(() => ({}));
  for (const job of jobs) graph.setNode(String(job.id), sizeOf(job));
  for (const job of jobs) for (const dep of job.depends) graph.setEdge(String(dep), String(job.id));
  for (const job of jobs)
    if (job.map_of !== undefined && graph.hasNode(String(job.map_of)))
      graph.setEdge(String(job.map_of), String(job.id), { map: true });
  // A compensation after the job it undoes, so the unwinding sits after the run.
  for (const job of jobs)
    if (job.compensates !== undefined) graph.setEdge(String(job.compensates), String(job.id), { undo: true });
  layout(graph);
  return graph;
}

/**
 * The laid-out edges, as arrows (a map's to its instances dashed); the arc from a job to its
 * compensation dashed, without a head.
 */
function edgesOf(graph: Graph): SVGElement[] {
  return graph.edges().map((e) => {
    const edge = graph.edge(e) as { points: { x: number; y: number }[]; map?: boolean; undo?: boolean };
    const d = edge.points.map((p, i) => `${i === 0 ? "M" : "L"}${p.x.toFixed(1)},${p.y.toFixed(1)}`).join(" ");
    if (edge.undo) return svg("path", { class: "edge undo", d, "data-undo": `${e.v}-${e.w}` });
    return svg("path", { class: edge.map ? "edge edge-map" : "edge", d, "marker-end": "url(#arrow)" });
  });
}

/** A dashed frame behind each map's instances, labelled with the map's name and their count. */
function groupsOf(graph: Graph, jobs: DagJob[]): SVGElement[] {
  const members = new Map<number, DagJob[]>();
  for (const job of jobs)
    if (job.map_of !== undefined) members.set(job.map_of, [...(members.get(job.map_of) ?? []), job]);
  const keyOf = new Map(jobs.map((job) => [job.id, job.key]));
  return [...members].map(([map, instances]) => {
    const boxes = instances.map((job) => ({
      ...(graph.node(String(job.id)) as { x: number; y: number }),
      ...sizeOf(job),
    }));
    const left = Math.min(...boxes.map((b) => b.x - b.width / 2)) - 6;
    const top = Math.min(...boxes.map((b) => b.y - b.height / 2)) - 18;
    const right = Math.max(...boxes.map((b) => b.x + b.width / 2)) + 6;
    const bottom = Math.max(...boxes.map((b) => b.y + b.height / 2)) + 6;
    return svg(
      "g",
      { class: "map-group", "data-map": map },
      svg("rect", { x: left, y: top, width: right - left, height: bottom - top, rx: 9 }),
      svg("text", { x: left + 8, y: top + 12 }, `${keyOf.get(map) ?? map} × ${instances.length}`),
    );
  });
}

export class DagView {
  readonly element: HTMLElement;
  private readonly canvas: SVGElement;
  private readonly viewport: HTMLElement;
  private readonly nodes = new Map<number, SVGElement>();
  /** Each job as last drawn, for the countdowns `tick` writes again. */
  private readonly jobs = new Map<number, DagJob>();
  private readonly width: number;
  /** Seconds ticked (`tick`), for what is written again less often. */
  private ticks = 0;
  private readonly height: number;
  private scale = 1;
  /** Whether the zoom was set (fitted, or chosen): until then `fitOnce` fits the graph to its viewport. */
  private zoomSet = false;
  private selected: number | undefined;

  /**
   * `scale`: the zoom to start at (a graph drawn again as its flow grew keeps the last one's);
   * without one, the graph fits its viewport's width once it is on screen (`fitOnce`). On a
   * narrow screen (a phone) it is laid out top to bottom, which fits a narrow width better.
   */
  constructor(jobs: DagJob[], onSelect: (jobId: number) => void, scale?: number) {
    const graph = laidOut(jobs, window.innerWidth < NARROW ? "TB" : "LR");
    const size = graph.graph() as { width?: number; height?: number };
    this.width = Math.ceil(size.width ?? NODE_W);
    this.height = Math.ceil(size.height ?? NODE_H);
    const nodes = jobs.map((job) => {
      const node = nodeOf(job, graph.node(String(job.id)) as { x: number; y: number }, () => onSelect(job.id));
      this.nodes.set(job.id, node);
      this.jobs.set(job.id, job);
      return node;
    });
    const arrow = svg(
      "marker",
      { id: "arrow", viewBox: "0 0 10 10", refX: 10, refY: 5, markerWidth: 7, markerHeight: 7, orient: "auto" },
      svg("path", { d: "M0,0 L10,5 L0,10 z", class: "arrowhead" }),
    );
    this.canvas = svg(
      "svg",
      {
        class: "dag",
        viewBox: `0 0 ${this.width} ${this.height}`,
        role: "group",
        "aria-label": `the flow's ${jobs.length} jobs and their dependencies`,
      },
      svg("defs", {}, arrow),
      svg("g", {}, ...groupsOf(graph, jobs)),
      svg("g", {}, ...edgesOf(graph)),
      svg("g", {}, ...nodes),
    );
    this.viewport = h("div", { class: "dag-viewport" }, this.canvas);
    this.viewport.addEventListener(
      "wheel",
      (event) => {
        if (!event.ctrlKey) return; // plain wheel scrolls; Ctrl + wheel (and pinch) zooms
        event.preventDefault();
        this.zoom(event.deltaY < 0 ? 1.15 : 1 / 1.15);
      },
      { passive: false },
    );
    this.element = h("div", { class: "dag-box" }, this.controls(), this.viewport);
    this.setScale(scale ?? 1);
    this.zoomSet = scale !== undefined;
  }

  /** Fits the graph to its viewport's width, the first time it is on screen with a width. */
  fitOnce(): void {
    if (this.zoomSet || this.viewport.clientWidth === 0) return;
    this.fit();
  }

  /** Whether the graph has a node for the job (a job that joined the flow since has none yet). */
  has(jobId: number): boolean {
    return this.nodes.has(jobId);
  }

  /** The zoom it is drawn at. */
  get zoomed(): number {
    return this.scale;
  }

  /** The zoom buttons. */
  private controls(): HTMLElement {
    const button = (label: string, title: string, action: () => void) =>
      h("button", { type: "button", class: "small", title, "aria-label": title, onclick: action }, label);
    return h(
      "div",
      { class: "dag-controls" },
      button("−", "Zoom out", () => this.zoom(1 / 1.25)),
      button("+", "Zoom in", () => this.zoom(1.25)),
      button("Fit", "Fit the whole graph", () => this.fit()),
      button("1:1", "Actual size", () => this.setScale(1)),
    );
  }

  /**
   * Redraws a node after an event or a reading of the view: its status class, its second line,
   * its third (what it waits for, why it was skipped), its tooltip and its label. Its place and
   * shape stay: the graph is never laid out again.
   */
  update(job: DagJob): void {
    const node = this.nodes.get(job.id);
    if (!node) return;
    this.jobs.set(job.id, job);
    node.setAttribute("class", nodeClass(job, this.selected === job.id));
    node.setAttribute("data-status", job.status);
    node.setAttribute("aria-label", ariaLabel(job));
    const title = node.querySelector(":scope > title");
    if (title) title.textContent = tooltip(job);
    const { sub, detail, time } = linesOf(job);
    const second = node.querySelector("text.sub");
    const third = node.querySelector("text.detail");
    const clock = node.querySelector("text.time");
    if (second) second.textContent = sub;
    if (third) third.textContent = detail ?? "";
    if (clock) clock.textContent = time;
  }

  /**
   * Every second: the running jobs' times tick, and the countdowns of the waits and sleeps under
   * way are written again (their lines cut to fit anew every fifth second).
   */
  tick(): void {
    this.ticks++;
    const now = Date.now();
    for (const job of this.jobs.values()) {
      if (job.status !== "started") continue;
      if (job.waiting?.until !== undefined && this.ticks % 5 === 0) this.update(job);
      else {
        const clock = this.nodes.get(job.id)?.querySelector("text.time");
        if (clock) clock.textContent = timeText(job, now);
      }
    }
  }

  /** Marks the job whose panel is open. */
  select(jobId: number | undefined): void {
    if (this.selected !== undefined) this.nodes.get(this.selected)?.classList.remove("selected");
    this.selected = jobId;
    if (jobId !== undefined) this.nodes.get(jobId)?.classList.add("selected");
  }

  /** Gives the keyboard focus to a job's node (after the panel closes). */
  focus(jobId: number): void {
    (this.nodes.get(jobId) as unknown as HTMLElement | undefined)?.focus();
  }

  private zoom(factor: number): void {
    this.setScale(this.scale * factor);
  }

  /** Scales the whole graph to the viewport's width (never above actual size). */
  fit(): void {
    const style = getComputedStyle(this.viewport);
    const available = this.viewport.clientWidth - parseFloat(style.paddingLeft) - parseFloat(style.paddingRight) - 1;
    this.setScale(available > 0 ? Math.min(1, available / this.width) : 1);
  }

  private setScale(scale: number): void {
    this.zoomSet = true;
    this.scale = Math.min(3, Math.max(0.05, scale));
    this.canvas.setAttribute("width", String(Math.round(this.width * this.scale)));
    this.canvas.setAttribute("height", String(Math.round(this.height * this.scale)));
  }
}
