import { formatMs } from "../../shared/model/durations.js";
import type { FlowView, JobView } from "../../shared/model/index.js";
import { fill, h } from "./dom.js";
import { jobWords, plainClassOf, plainText } from "./status-words.js";
import { begunAt, type Attempt, type Attempts } from "./timeline-model.js";

/**
 * The flow's timeline (a Gantt chart): a row per job, a bar per attempt from its start to its
 * end, coloured by how it went (its plain status), the time it waited for a runner drawn lighter
 * before it, on a time axis from the flow's start. While the flow runs the axis ends at now and
 * running bars grow (`tick`, every second). Rows are ordered by when each job first queued or
 * began; jobs that never ran come last and say why. A row's name (a button) opens the job's
 * panel. Bars are placed with CSSOM styles (the page's CSP allows no inline style attributes).
 */

/** Steps of the axis' ticks (ms): the first that leaves each tick room for its label is used. */
const STEPS = [
  1, 2, 5, 10, 20, 50, 100, 200, 500, 1_000, 2_000, 5_000, 10_000, 15_000, 30_000, 60_000, 120_000, 300_000, 600_000,
  900_000, 1_800_000, 3_600_000, 7_200_000, 21_600_000, 43_200_000, 86_400_000,
];

const clock = new Intl.DateTimeFormat(undefined, { hour: "2-digit", minute: "2-digit", second: "2-digit" });

/** An instant to the millisecond in the viewer's zone: `14:05:03.120`. */
function instant(ms: number): string {
  return `${clock.format(new Date(ms))}.${String(ms % 1000).padStart(3, "0")}`;
}

/** A bar placed on the axis: its element and the instants it spans (`to` unset: until now). */
interface Placed {
  element: HTMLElement;
  from: number;
  to: number | undefined;
}

export class TimelineView {
  readonly element: HTMLElement;
  private readonly axis = h("div", { class: "tl-axis", "aria-hidden": "true" });
  private readonly origin = h("span", { class: "tl-origin muted" });
  private readonly rows = h("div", { class: "tl-rows", role: "list" });
  private placed: Placed[] = [];
  private domain = { from: 0, to: 1 };
  /** Whether the axis ends at now (the flow runs). */
  private live = false;
  private selected: number | undefined;

  constructor(private readonly onSelect: (jobId: number) => void) {
    this.element = h(
      "div",
      { class: "timeline", "data-testid": "timeline" },
      h("div", { class: "tl-head" }, this.origin, this.axis, h("span", { class: "tl-took-head muted" }, "took")),
      this.rows,
    );
  }

  /** Draws every row again from the view (the jobs) and the attempts (their bars). */
  draw(view: FlowView, attempts: Attempts): void {
    const span = attempts.span();
    const from = Math.min(view.started_at_ms ?? Number.POSITIVE_INFINITY, span?.from ?? Number.POSITIVE_INFINITY);
    this.placed = [];
    if (!Number.isFinite(from)) {
      fill(this.origin, "not started");
      fill(this.axis);
      fill(this.rows, h("p", { class: "muted tl-empty" }, "Nothing has run yet: bars appear as jobs run."));
      return;
    }
    const start = new Date(from);
    fill(this.origin, h("time", { datetime: start.toISOString(), title: instant(from) }, clock.format(start)));
    const order = new Map(view.jobs.map((job, i) => [job.id, i]));
    const firstTime = (job: JobView) => {
      const first = attempts.of(job.id)[0];
      return first ? (first.queued ?? begunAt(first) ?? first.ended) : undefined;
    };
    const sorted = view.jobs
      .map((job) => ({ job, at: firstTime(job) }))
      .sort(
        (a, b) =>
          (a.at ?? Number.POSITIVE_INFINITY) - (b.at ?? Number.POSITIVE_INFINITY) ||
          (order.get(a.job.id) ?? 0) - (order.get(b.job.id) ?? 0),
      );
    fill(this.rows, ...sorted.map(({ job }) => this.row(job, attempts.of(job.id))));
    // The axis ends at now while the flow runs, or while an attempt still runs after its flow ended.
    const running = view.ended_at_ms === undefined && (view.status === "started" || view.status === "compensating");
    this.live = running || this.placed.some((p) => p.to === undefined);
    const end = Math.max(span?.to ?? from, view.ended_at_ms ?? from);
    this.domain = { from, to: this.live ? Math.max(end, Date.now()) : end };
    this.place();
  }

  /** One job's row: its name, its attempts' bars, and how long its latest attempt ran. */
  private row(job: JobView, attempts: Attempt[]): HTMLElement {
    const words = jobWords(job);
    const label = h(
      "button",
      { type: "button", class: "tl-label", title: `${job.key} (job ${job.id}): ${plainText(words)}` },
      job.key,
    );
    label.addEventListener("click", () => this.onSelect(job.id));
    const track = h("div", { class: "tl-track" });
    for (const a of attempts) this.bars(track, job, a);
    if (attempts.length === 0) track.append(h("span", { class: "tl-none muted" }, plainText(words)));
    const last = attempts.at(-1);
    const begun = last ? begunAt(last) : undefined;
    const took =
      begun === undefined
        ? ""
        : last?.ended !== undefined
          ? formatMs(last.ended - begun)
          : job.status === "started"
            ? formatMs(Date.now() - begun)
            : "";
    const tookElement = h("span", { class: "tl-took" }, took);
    if (begun !== undefined && last?.ended === undefined && job.status === "started")
      tookElement.dataset.sinceMs = String(begun);
    return h(
      "div",
      {
        class: `tl-row ${plainClassOf(words.word)}${this.selected === job.id ? " selected" : ""}`,
        role: "listitem",
        "data-job": job.id,
        "data-status": job.status,
      },
      label,
      track,
      tookElement,
    );
  }

  /** An attempt's bars: the wait for a runner (lighter), then its run, coloured by how it went. */
  private bars(track: HTMLElement, job: JobView, a: Attempt): void {
    const begun = begunAt(a);
    const running = a.ended === undefined && (a.word === "running" || a.word === "queued" || a.word === "waiting");
    if (a.queued !== undefined && (begun !== undefined || a.ended !== undefined || running)) {
      const wait = h("span", { class: "tl-wait", title: `attempt ${a.attempt}: waited for a runner` });
      track.append(wait);
      this.placed.push({ element: wait, from: a.queued, to: begun ?? a.ended });
    }
    if (begun === undefined) return;
    const took = a.ended !== undefined ? formatMs(a.ended - begun) : "running";
    const why = a.why ? `: ${a.why}` : "";
    const title = `${job.key}, attempt ${a.attempt}${a.run > 1 ? ` (run ${a.run})` : ""}: ${a.word}${why} · ${took} · ${instant(begun)}${a.ended !== undefined ? ` → ${instant(a.ended)}` : ""}`;
    const bar = h("span", {
      class: `tl-bar ${plainClassOf(a.word)}`,
      title,
      "data-attempt": a.attempt,
      "aria-label": title,
    });
    bar.addEventListener("click", () => this.onSelect(job.id));
    track.append(bar);
    this.placed.push({ element: bar, from: begun, to: a.ended });
  }

  /** Sets every bar's place and width on the axis, and the axis' ticks. */
  private place(): void {
    const { from, to } = this.domain;
    const length = Math.max(1, to - from);
    const pct = (t: number) => `${(((t - from) / length) * 100).toFixed(3)}%`;
    for (const { element, from: a, to: b } of this.placed) {
      element.style.left = pct(a);
      element.style.width = `${((((b ?? to) - a) / length) * 100).toFixed(3)}%`;
    }
    // A tick's label takes some 70 px: a phone's axis has two or three, a desktop's six.
    const most = Math.max(2, Math.min(6, Math.floor((this.axis.clientWidth || 420) / 70)));
    const step = STEPS.find((s) => length / s <= most) ?? 86_400_000;
    const ticks: HTMLElement[] = [];
    for (let t = 0; t <= length; t += step) {
      const tick = h("span", { class: "tl-tick" }, t === 0 ? "0" : `+${formatMs(t)}`);
      tick.style.left = pct(from + t);
      ticks.push(tick);
    }
    fill(this.axis, ...ticks);
  }

  /** Every second while something runs: the axis ends at now, and running bars grow to it. */
  tick(): void {
    if (!this.live || this.placed.length === 0) return;
    this.domain = { from: this.domain.from, to: Math.max(this.domain.to, Date.now()) };
    this.place();
  }

  /** Marks the row of the job whose panel is open. */
  select(jobId: number | undefined): void {
    this.selected = jobId;
    for (const row of this.rows.querySelectorAll<HTMLElement>(".tl-row"))
      row.classList.toggle("selected", row.dataset.job === String(jobId));
  }
}
