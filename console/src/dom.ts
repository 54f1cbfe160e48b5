import { formatMs } from "../../shared/model/durations.js";

/**
 * The console's whole view layer: `h` builds elements, the formatters show times in the viewer's
 * own time zone (the browser's), and `notify` speaks through the page's live region. No framework:
 * pages rebuild what changed, and live updates touch single elements.
 */

type Child = Node | string | number | false | null | undefined;
type Attrs = Record<string, string | number | boolean | undefined | ((event: Event) => void)>;

/**
 * An element: `h("a", { href: "#/", class: "x" }, "text", child)`. Attributes named `on<event>`
 * take listeners; `false` and `undefined` attributes are left out; `true` sets an empty one.
 */
export function h<K extends keyof HTMLElementTagNameMap>(
  tag: K,
  attrs: Attrs = {},
  ...children: Child[]
): HTMLElementTagNameMap[K] {
  const element = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs)) {
    if (typeof value === "function") element.addEventListener(name.slice(2), value);
    else if (value === true) element.setAttribute(name, "");
    else if (value !== undefined && value !== false) element.setAttribute(name, String(value));
  }
  element.append(...nodes(children));
  return element;
}

const SVG_NS = "http://www.w3.org/2000/svg";

/** An SVG element, as `h` builds HTML ones. */
export function svg(tag: string, attrs: Attrs = {}, ...children: Child[]): SVGElement {
  const element = document.createElementNS(SVG_NS, tag) as SVGElement;
  for (const [name, value] of Object.entries(attrs)) {
    if (typeof value === "function") element.addEventListener(name.slice(2), value);
    else if (value !== undefined && value !== false) element.setAttribute(name, String(value));
  }
  element.append(...nodes(children));
  return element;
}

function nodes(children: Child[]): (Node | string)[] {
  return children.flatMap((c) =>
    c === false || c === null || c === undefined ? [] : [typeof c === "number" ? String(c) : c],
  );
}

/** Replaces an element's children. */
export function fill(parent: Element, ...children: Child[]): void {
  parent.replaceChildren(...nodes(children));
}

/** The viewer's time zone, as the browser reports it (shown once in the footer). */
export const TIME_ZONE = Intl.DateTimeFormat().resolvedOptions().timeZone;

const dateTime = new Intl.DateTimeFormat(undefined, { dateStyle: "medium", timeStyle: "medium" });
const timeOnly = new Intl.DateTimeFormat(undefined, { timeStyle: "medium" });

/** Epoch seconds as a local date and time; today's times without the date. */
export function formatTime(epochSeconds: number | undefined): string {
  if (epochSeconds === undefined) return "—";
  const date = new Date(epochSeconds * 1000);
  return date.toDateString() === new Date().toDateString() ? timeOnly.format(date) : dateTime.format(date);
}

/** A `<time>` element: local time shown, the exact instant in its `datetime` and tooltip. */
export function timeElement(epochSeconds: number | undefined): HTMLElement {
  if (epochSeconds === undefined) return h("span", { class: "muted" }, "—");
  const date = new Date(epochSeconds * 1000);
  return h("time", { datetime: date.toISOString(), title: dateTime.format(date) }, formatTime(epochSeconds));
}

/** A length of time given in seconds, `1 h 02 min`, `3 min 04 s`, `9.2 s`, `420 ms` (formatMs). */
export function formatDuration(seconds: number): string {
  return formatMs(seconds * 1000);
}

/**
 * How long something took (`420 ms`, `9.2 s`), or, without an end, how long it has been running:
 * such an element carries its start and is rewritten every second by `refreshClocks`, so a
 * running job's or flow's duration ticks wherever it is shown.
 */
export function durationElement(fromMs: number | undefined, toMs?: number): HTMLElement {
  if (fromMs === undefined) return h("span", { class: "took muted" }, "—");
  if (toMs !== undefined) return h("span", { class: "took" }, formatMs(toMs - fromMs));
  return h("span", { class: "took ticking", "data-since-ms": fromMs }, formatMs(Date.now() - fromMs));
}

/** How long ago, `5 min ago`. */
export function formatAge(epochSeconds: number): string {
  const seconds = Math.max(0, Math.floor(Date.now() / 1000 - epochSeconds));
  return seconds < 5 ? "just now" : `${formatDuration(seconds)} ago`;
}

/**
 * An age that keeps itself current: the element carries its instant, and `refreshClocks` (run
 * every second by the shell) rewrites every such element on the page.
 */
export function ageElement(epochSeconds: number): HTMLElement {
  const date = new Date(epochSeconds * 1000);
  return h(
    "time",
    { datetime: date.toISOString(), title: dateTime.format(date), "data-age": epochSeconds },
    formatAge(epochSeconds),
  );
}

/** Rewrites every `ageElement` and every running `durationElement` on the page (every second). */
export function refreshClocks(): void {
  for (const element of document.querySelectorAll<HTMLElement>("[data-age]")) {
    element.textContent = formatAge(Number(element.dataset.age));
  }
  const now = Date.now();
  for (const element of document.querySelectorAll<HTMLElement>("[data-since-ms]")) {
    element.textContent = formatMs(now - Number(element.dataset.sinceMs));
  }
}

/** A status as a coloured badge: the colour is a class, the word is always there too. */
export function badge(status: string, extra = ""): HTMLElement {
  return h("span", { class: `badge st-${status}${extra ? ` ${extra}` : ""}` }, status.replaceAll("_", " "));
}

/** A table that scrolls sideways on narrow screens instead of squeezing its columns. */
export function table(headers: string[], rows: HTMLTableRowElement[], caption?: string): HTMLElement {
  return h(
    "div",
    { class: "table-wrap" },
    h(
      "table",
      {},
      caption ? h("caption", {}, caption) : undefined,
      h("thead", {}, h("tr", {}, ...headers.map((text) => h("th", { scope: "col" }, text)))),
      h("tbody", {}, ...rows),
    ),
  );
}

/**
 * Says something in the page's notice area (an ARIA live region): errors stay until dismissed,
 * other notices fade after a while.
 */
export function notify(text: string, kind: "error" | "info" = "info"): void {
  const area = document.getElementById("notices");
  if (!area) return;
  const close = h("button", { type: "button", class: "link", "aria-label": "Dismiss" }, "×");
  const notice = h(
    "div",
    { class: `notice ${kind}`, role: kind === "error" ? "alert" : "status" },
    h("span", {}, text),
    close,
  );
  close.addEventListener("click", () => notice.remove());
  area.append(notice);
  if (kind === "info") setTimeout(() => notice.remove(), 6_000);
}
