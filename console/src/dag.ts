import { Graph, layout } from "@dagrejs/dagre";
import type { JobView } from "../../shared/model/index.js";
import { h, svg } from "./dom.js";
import { detailLine, hasRules, KIND_BADGE, rulesLine, statusLine, tooltip } from "./job-text.js";

/**
 * A flow's DAG as an SVG: laid out left to right in layers by dagre (each job after the jobs it
 * depends on), an arrow per dependency, a node per job coloured by its status (a class, with the
 * status written under the name too). Live updates recolour nodes in place, never lay the graph
 * out again, so nothing jumps while a flow runs. Big flows stay legible: the graph is drawn at
 * full size in a scrolling viewport, with zoom buttons (and Ctrl + wheel) and "fit".
 *
 * A job that runs no script has its own shape and a badge: a wait is a hexagon (⏸ wait), a
 * sleep a pill (☾ sleep). Those, and jobs with rules of their own (`when`, `needs`,
 * `allow_failure`: a ⚑ marker), are a line taller: what the wait waits for and how long it has
 * left, until when the sleep sleeps, the rule, or why the job was skipped. A skipped job is
 * drawn dashed and grey. A compensation (it undoes a job if the flow unwinds) has a ↩ undo badge
 * and a dashed outline of its own colour, and a dashed arc from the job it undoes: the flow's
 * unwinding reads left to right after its run.
 */

const NODE_W = 172;
const NODE_H = 46;
/** A node with a third line (a wait, a sleep, a job with rules) is wider and taller. */
const TALL_W = 212;
const TALL_H = 62;
const MAX_LABEL = 20;
/** How long an active wait or sleep's countdown stays as written before it is written again. */
export const COUNTDOWN_MS = 5_000;

/** What a node shows of its job. */
export type DagJob = Pick<
  JobView,
  | "id"
  | "key"
  | "status"
  | "attempt"
  | "depends"
  | "kind"
  | "wait"
  | "sleep_until"
  | "skip_reason"
  | "when"
  | "needs"
  | "allow_failure"
  | "waiting"
> &
  Partial<Pick<JobView, "result" | "error" | "compensates">>;

function shorten(text: string, max: number): string {
  return text.length > max ? `${text.slice(0, max - 1).trimEnd()}…` : text;
}

let measure: CanvasRenderingContext2D | null | undefined;
let family: string | undefined;

/** How wide `text` is drawn in `font` (CSS shorthand without the family), in px. */
function textWidth(text: string, font: string): number {
  measure ??= document.createElement("canvas").getContext("2d");
  if (!measure) return text.length * 6.5;
  family ??= getComputedStyle(document.documentElement).fontFamily || "sans-serif";
  measure.font = `${font} ${family}`;
  return measure.measureText(text).width;
}

/**
 * A line cut to fit `px` (with an ellipsis) when drawn in `font` (CSS shorthand, the page's own
 * family appended): measured on a canvas, so the cut is where the line really ends, whatever
 * the viewer's fonts. The tooltip and the job panel say it all.
 */
function fit(text: string, px: number, font: string): string {
  if (textWidth(text, font) <= px) return text;
  let low = 0;
  let high = text.length;
  while (low < high) {
    const mid = Math.ceil((low + high) / 2);
    if (textWidth(`${text.slice(0, mid).trimEnd()}…`, font) <= px) low = mid;
    else high = mid - 1;
  }
  return `${text.slice(0, low).trimEnd()}…`;
}

/** Whether a job's node has the third line. */
function isTall(job: DagJob): boolean {
  return job.kind !== "script" || hasRules(job) || job.compensates !== undefined;
}

function sizeOf(job: DagJob): { width: number; height: number } {
  return isTall(job) ? { width: TALL_W, height: TALL_H } : { width: NODE_W, height: NODE_H };
}

/** The jobs laid out left to right by dagre: a node per job, an edge per dependency. */
function laidOut(jobs: DagJob[]): Graph {
  const graph = new Graph();
  // A small edge separation: dagre routes every edge through a point between the layers, and
  // with the default (20) a densely connected flow grows many times taller than its nodes.
  graph.setGraph({ rankdir: "LR", nodesep: 14, edgesep: 4, ranksep: 56, marginx: 12, marginy: 12 });
  graph.setDefaultEdgeLabel(() => ({}));
  for (const job of jobs) graph.setNode(String(job.id), sizeOf(job));
  for (const job of jobs) for (const dep of job.depends) graph.setEdge(String(dep), String(job.id));
  // A compensation after the job it undoes, so the unwinding sits after the run.
  for (const job of jobs)
    if (job.compensates !== undefined) graph.setEdge(String(job.compensates), String(job.id), { undo: true });
  layout(graph);
  return graph;
}

/** The laid-out edges, as arrows; the arc from a job to its compensation dashed, without a head. */
function edgesOf(graph: Graph): SVGElement[] {
  return graph.edges().map((e) => {
    const edge = graph.edge(e) as { points: { x: number; y: number }[]; undo?: boolean };
    const d = edge.points.map((p, i) => `${i === 0 ? "M" : "L"}${p.x.toFixed(1)},${p.y.toFixed(1)}`).join(" ");
    return edge.undo
      ? svg("path", { class: "edge undo", d, "data-undo": `${e.v}-${e.w}` })
      : svg("path", { class: "edge", d, "marker-end": "url(#arrow)" });
  });
}

/** A node's outline by its kind: a box (script), a hexagon (wait), a pill (sleep). */
function shapeOf(job: DagJob, width: number, height: number): SVGElement {
  if (job.kind === "wait") {
    const cut = 12;
    const points = [
      [cut, 0],
      [width - cut, 0],
      [width, height / 2],
      [width - cut, height],
      [cut, height],
      [0, height / 2],
    ];
    return svg("polygon", { class: "shape", points: points.map((p) => p.join(",")).join(" ") });
  }
  return svg("rect", { class: "shape", width, height, rx: job.kind === "sleep" ? height / 2 : 7 });
}

/** Where a node's text starts: clear of a hexagon's or a pill's slanted ends. */
function textX(job: DagJob): number {
  return job.kind === "script" ? 10 : 16;
}

/**
 * A node's second and third lines: its status, then what it waits for, until when it sleeps,
 * its rule or why it was skipped. A node without a third line says why it was skipped on its
 * second. Each is cut to the node's width.
 */
function linesOf(job: DagJob): { sub: string; detail: string | undefined } {
  const room = sizeOf(job).width - textX(job) - 8;
  const detail = detailLine(job);
  if (isTall(job)) return { sub: statusLine(job), detail: fit(detail ?? "", room, "italic 11px") };
  const sub = job.status === "skipped" && detail ? `skipped: ${detail}` : statusLine(job);
  return { sub: fit(sub, room, "11px"), detail: undefined };
}

/**
 * The badges at the right of a node's first line: a wait's ⏸ and a sleep's ☾ with the word, and
 * the ⚑ of a job with rules (its tooltip says them). Icons are drawn, not characters, so they
 * look the same whatever fonts the viewer has. `left` is where the first one begins.
 */
function badgesOf(job: DagJob, width: number): SVGElement[] & { left: number } {
  const out: SVGElement[] = [];
  let right = width - (job.kind === "script" ? 8 : 14);
  if (job.kind !== "script") {
    const word = job.kind;
    const wordWidth = textWidth(word, "600 10px");
    const iconX = right - wordWidth - 12;
    const icon =
      job.kind === "wait"
        ? svg(
            "g",
            { class: "icon icon-pause", "aria-hidden": "true" },
            svg("rect", { x: iconX + 1, y: 10, width: 2.6, height: 9, rx: 0.6 }),
            svg("rect", { x: iconX + 5.4, y: 10, width: 2.6, height: 9, rx: 0.6 }),
          )
        : svg("path", {
            class: "icon icon-moon",
            "aria-hidden": "true",
            // A crescent (Feather's moon, 24 px, scaled to 10).
            d: "M21 12.79A9 9 0 1 1 11.21 3 7 7 0 0 0 21 12.79z",
            transform: `translate(${(iconX - 0.5).toFixed(1)},9.5) scale(0.42)`,
          });
    out.push(
      svg(
        "g",
        { class: "kind-badge" },
        svg("title", {}, KIND_BADGE[job.kind]),
        icon,
        svg("text", { x: right, y: 18.5, class: "kind", "text-anchor": "end" }, word),
      ),
    );
    right = iconX - 6;
  }
  if (job.compensates !== undefined) {
    const wordWidth = textWidth("undo", "600 10px");
    const iconX = right - wordWidth - 13;
    out.push(
      svg(
        "g",
        { class: "kind-badge undo-badge" },
        svg("title", {}, "↩ compensation: runs only if the flow unwinds"),
        // A hook arrow pointing back (↩), drawn so it looks the same in every font.
        svg("path", { class: "undo-icon", "aria-hidden": "true", d: `M${iconX + 9},11 v4 h-7 m3,-3 l-3,3 l3,3` }),
        svg("text", { x: right, y: 18.5, class: "kind", "text-anchor": "end" }, "undo"),
      ),
    );
    right = iconX - 6;
  }
  if (hasRules(job)) {
    const x = right - 8;
    out.push(
      svg(
        "g",
        { class: "rules-mark", transform: `translate(${x.toFixed(1)},9.5)` },
        svg("title", {}, `rules: ${rulesLine(job)}`),
        svg("path", { d: "M1,0 V10", class: "pole" }),
        svg("path", { d: "M1.5,0.5 H8 L6.2,3 L8,5.5 H1.5 Z" }),
      ),
    );
    right = x;
  }
  return Object.assign(out, { left: right });
}

/** The node's class: its status, its kind, whether it is chosen. */
function nodeClass(job: DagJob, selected: boolean): string {
  const undo = job.compensates !== undefined ? " compensation" : "";
  return `node st-${job.status} kind-${job.kind}${undo}${hasRules(job) ? " has-rules" : ""}${selected ? " selected" : ""}`;
}

function ariaLabel(job: DagJob): string {
  const detail = detailLine(job);
  const kind = job.compensates !== undefined ? "compensation" : job.kind === "script" ? "job" : job.kind;
  return `${kind} ${job.key}: ${statusLine(job)}${detail ? `, ${detail}` : ""}`;
}

/** A job's node at its place: a box with its name and status, chosen by click, Enter or space. */
function nodeOf(job: DagJob, box: { x: number; y: number }, select: () => void): SVGElement {
  const { width, height } = sizeOf(job);
  const tall = isTall(job);
  const x = textX(job);
  const badges = badgesOf(job, width);
  // The name gives way to the badges on its line.
  const name = badges.length > 0 ? fit(job.key, badges.left - x - 6, "600 13px") : shorten(job.key, MAX_LABEL);
  const { sub, detail } = linesOf(job);
  const node = svg(
    "g",
    {
      class: nodeClass(job, false),
      transform: `translate(${(box.x - width / 2).toFixed(1)},${(box.y - height / 2).toFixed(1)})`,
      tabindex: 0,
      role: "button",
      "data-job": job.id,
      "data-status": job.status,
      "data-kind": job.kind,
      "aria-label": ariaLabel(job),
    },
    svg("title", {}, tooltip(job)),
    shapeOf(job, width, height),
    svg("text", { x, y: 19, class: "name" }, name),
    ...badges,
    svg("text", { x, y: 36, class: "sub" }, sub),
    tall ? svg("text", { x, y: 52, class: "detail" }, detail) : undefined,
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
  /** Each job as last drawn, for the countdowns `tick` writes again. */
  private readonly jobs = new Map<number, DagJob>();
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
    const { sub, detail } = linesOf(job);
    const second = node.querySelector("text.sub");
    const third = node.querySelector("text.detail");
    if (second) second.textContent = sub;
    if (third) third.textContent = detail ?? "";
  }

  /** Writes the countdowns of the waits and sleeps under way again (every few seconds). */
  tick(): void {
    for (const job of this.jobs.values()) {
      if (job.status === "started" && job.waiting?.until !== undefined) this.update(job);
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
