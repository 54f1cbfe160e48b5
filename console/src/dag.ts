import { Graph, layout } from "@dagrejs/dagre";
import type { JobView } from "../../shared/model/index.js";
import { h, svg } from "./dom.js";

/**
 * A flow's DAG as an SVG: laid out left to right in layers by dagre (each job after the jobs it
 * depends on), an arrow per dependency, a node per job coloured by its status (a class, with the
 * status written under the name too). Live updates recolour nodes in place, never lay the graph
 * out again, so nothing jumps while a flow runs. Big flows stay legible: the graph is drawn at
 * full size in a scrolling viewport, with zoom buttons (and Ctrl + wheel) and "fit".
 */

const NODE_W = 172;
const NODE_H = 46;
const MAX_LABEL = 20;

/** What a node shows of its job. */
export type DagJob = Pick<JobView, "id" | "key" | "status" | "attempt" | "depends">;

function subtitle(job: DagJob): string {
  const status = job.status.replaceAll("_", " ");
  return job.attempt > 1 ? `${status} · attempt ${job.attempt}` : status;
}

function shortLabel(key: string): string {
  return key.length > MAX_LABEL ? `${key.slice(0, MAX_LABEL - 1)}…` : key;
}

/** The jobs laid out left to right by dagre: a node per job, an edge per dependency. */
function laidOut(jobs: DagJob[]): Graph {
  const graph = new Graph();
  // A small edge separation: dagre routes every edge through a point between the layers, and
  // with the default (20) a densely connected flow grows many times taller than its nodes.
  graph.setGraph({ rankdir: "LR", nodesep: 14, edgesep: 4, ranksep: 56, marginx: 12, marginy: 12 });
  graph.setDefaultEdgeLabel(() => ({}));
  for (const job of jobs) graph.setNode(String(job.id), { width: NODE_W, height: NODE_H });
  for (const job of jobs) for (const dep of job.depends) graph.setEdge(String(dep), String(job.id));
  layout(graph);
  return graph;
}

/** The laid-out edges, as arrows. */
function edgesOf(graph: Graph): SVGElement[] {
  return graph.edges().map((e) => {
    const points = (graph.edge(e) as { points: { x: number; y: number }[] }).points;
    const d = points.map((p, i) => `${i === 0 ? "M" : "L"}${p.x.toFixed(1)},${p.y.toFixed(1)}`).join(" ");
    return svg("path", { class: "edge", d, "marker-end": "url(#arrow)" });
  });
}

/** A job's node at its place: a box with its name and status, chosen by click, Enter or space. */
function nodeOf(job: DagJob, box: { x: number; y: number }, select: () => void): SVGElement {
  const node = svg(
    "g",
    {
      class: `node st-${job.status}`,
      transform: `translate(${(box.x - NODE_W / 2).toFixed(1)},${(box.y - NODE_H / 2).toFixed(1)})`,
      tabindex: 0,
      role: "button",
      "data-job": job.id,
      "data-status": job.status,
      "aria-label": `job ${job.key}: ${subtitle(job)}`,
    },
    svg("title", {}, `${job.key} (job ${job.id})`),
    svg("rect", { width: NODE_W, height: NODE_H, rx: 7 }),
    svg("text", { x: 10, y: 19, class: "name" }, shortLabel(job.key)),
    svg("text", { x: 10, y: 36, class: "sub" }, subtitle(job)),
  );
  node.addEventListener("click", select);
  node.addEventListener("keydown", (event) => {
    const key = (event as KeyboardEvent).key;
    if (key === "Enter" || key === " ") {
      event.preventDefault();
      select();
    }
  });
  return node;
}

export class DagView {
  readonly element: HTMLElement;
  private readonly canvas: SVGElement;
  private readonly viewport: HTMLElement;
  private readonly nodes = new Map<number, SVGElement>();
  private readonly width: number;
  private readonly height: number;
  private scale = 1;
  private selected: number | undefined;

  constructor(jobs: DagJob[], onSelect: (jobId: number) => void) {
    const graph = laidOut(jobs);
    const size = graph.graph() as { width?: number; height?: number };
    this.width = Math.ceil(size.width ?? NODE_W);
    this.height = Math.ceil(size.height ?? NODE_H);
    const nodes = jobs.map((job) => {
      const node = nodeOf(job, graph.node(String(job.id)) as { x: number; y: number }, () => onSelect(job.id));
      this.nodes.set(job.id, node);
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
    this.setScale(1);
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

  /** Recolours a node after an event: its status class, its second line and its label. */
  update(job: Pick<DagJob, "id" | "key" | "status" | "attempt">): void {
    const node = this.nodes.get(job.id);
    if (!node) return;
    node.setAttribute("class", `node st-${job.status}${this.selected === job.id ? " selected" : ""}`);
    node.setAttribute("data-status", job.status);
    node.setAttribute("aria-label", `job ${job.key}: ${subtitle(job as DagJob)}`);
    const sub = node.querySelector("text.sub");
    if (sub) sub.textContent = subtitle(job as DagJob);
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
  private fit(): void {
    const available = this.viewport.clientWidth - 4;
    this.setScale(available > 0 ? Math.min(1, available / this.width) : 1);
  }

  private setScale(scale: number): void {
    this.scale = Math.min(3, Math.max(0.1, scale));
    this.canvas.setAttribute("width", String(Math.round(this.width * this.scale)));
    this.canvas.setAttribute("height", String(Math.round(this.height * this.scale)));
  }
}
