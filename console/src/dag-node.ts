import type { JobView } from "../../shared/model/index.js";
import { svg } from "./dom.js";
import { detailLine, hasRules, KIND_BADGE, rulesLine, statusLine, timeText, tooltip } from "./job-text.js";
import { jobWords, plainClassOf, plainText } from "./status-words.js";

/**
 * One node of a flow's DAG (dag.ts): its size, its shape by the job's kind (a box, a wait's
 * hexagon, a sleep's pill, a map's stacked box), its lines and badges, and how it is chosen.
 */

export const NODE_W = 172;
export const NODE_H = 46;
/** A node with a third line (a wait, a sleep, a job with rules) is wider and taller. */
const TALL_W = 212;
const TALL_H = 62;
const MAX_LABEL = 20;

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
  Partial<
    Pick<
      JobView,
      | "result"
      | "error"
      | "compensates"
      | "map"
      | "instances"
      | "map_of"
      | "item_index"
      | "added_by"
      | "started_at_ms"
      | "ended_at_ms"
      | "duration_ms"
    >
  >;

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

export function sizeOf(job: DagJob): { width: number; height: number } {
  return isTall(job) ? { width: TALL_W, height: TALL_H } : { width: NODE_W, height: NODE_H };
}

/**
 * A node's outline by its kind: a box (script), a hexagon (wait), a pill (sleep), a box with
 * another behind it (a map: one job standing for many).
 */
function shapeOf(job: DagJob, width: number, height: number): SVGElement {
  if (job.kind === "map")
    return svg(
      "g",
      { class: "stack" },
      svg("rect", { class: "shape behind", x: 4, y: -4, width, height, rx: 7 }),
      svg("rect", { class: "shape", width, height, rx: 7 }),
    );
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
 * A node's second and third lines: its status in plain words and, at the second line's right
 * end, how long it ran (or has been running); then what it waits for, until when it sleeps, its
 * rule or why it was skipped. A node without a third line says why it did not run on its second.
 * Each is cut to the node's width.
 */
export function linesOf(job: DagJob): { sub: string; detail: string | undefined; time: string } {
  const width = sizeOf(job).width - textX(job) - 8;
  const time = timeText(job);
  const room = time ? width - textWidth(time, "11px") - 8 : width;
  const detail = detailLine(job);
  if (isTall(job))
    return { sub: fit(statusLine(job), room, "11px"), detail: fit(detail ?? "", width, "italic 11px"), time };
  const words = jobWords(job);
  // Why it did not run, on the line that says so: `not run: dependency a failed`.
  const why = job.status === "skipped" ? detail : job.error;
  const sub = words.word === "not run" ? plainText({ word: "not run", ...(why ? { why } : {}) }) : statusLine(job);
  return { sub: fit(sub, room, "11px"), detail: undefined, time };
}

/** Where a node's time ends (right-aligned on its second line). */
export function timeX(job: DagJob): number {
  return sizeOf(job).width - (job.kind === "script" ? 8 : 14);
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
      job.kind === "map"
        ? svg(
            "g",
            { class: "icon icon-map", "aria-hidden": "true" },
            svg("rect", { x: iconX + 4, y: 8, width: 6, height: 6, rx: 1 }),
            svg("rect", { x: iconX + 2, y: 10.5, width: 6, height: 6, rx: 1 }),
            svg("rect", { x: iconX, y: 13, width: 6, height: 6, rx: 1 }),
          )
        : job.kind === "wait"
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

/** The node's class: its plain status (status-words.ts), its kind, whether it is chosen. */
export function nodeClass(job: DagJob, selected: boolean): string {
  const undo = job.compensates !== undefined ? " compensation" : "";
  const plain = plainClassOf(jobWords(job).word);
  return `node ${plain} kind-${job.kind}${undo}${hasRules(job) ? " has-rules" : ""}${selected ? " selected" : ""}`;
}

export function ariaLabel(job: DagJob): string {
  const detail = detailLine(job);
  const kind = job.compensates !== undefined ? "compensation" : job.kind === "script" ? "job" : job.kind;
  return `${kind} ${job.key}: ${statusLine(job)}${detail ? `, ${detail}` : ""}`;
}

/** A job's node at its place: a box with its name and status, chosen by click, Enter or space. */
export function nodeOf(job: DagJob, box: { x: number; y: number }, select: () => void): SVGElement {
  const { width, height } = sizeOf(job);
  const tall = isTall(job);
  const x = textX(job);
  const badges = badgesOf(job, width);
  // The name gives way to the badges on its line.
  const name = badges.length > 0 ? fit(job.key, badges.left - x - 6, "600 13px") : shorten(job.key, MAX_LABEL);
  const { sub, detail, time } = linesOf(job);
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
    svg("text", { x: timeX(job), y: 36, class: "time", "text-anchor": "end" }, time),
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
