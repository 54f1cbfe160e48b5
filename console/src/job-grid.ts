import type { FlowView, JobView } from "../../shared/model/index.js";
import { durationElement, fill, h, table, timeElement } from "./dom.js";
import { countWords, jobWords, JOB_WORDS, plainBadge, type PlainStatus } from "./status-words.js";

/**
 * A flow's jobs as a table, for flows too big to read as a graph: one row per job with its plain
 * status, attempt, start, how long it ran (ticking while it runs) and why it waits, failed or did
 * not run; filtered by status, by "running now" and by name; sorted so that what needs a look
 * comes first (failed, then running, queued, waiting, cancelled, not run, finished; within each,
 * by start). A row's name (a button) opens the job's panel. At most `PAGE` rows are drawn at a
 * time ("Show more" draws the next ones): a 10,000-job flow stays a table, not 10,000 rows.
 */

const PAGE = 500;

/** The order of the rows by plain status: what needs a look first. */
const RANK: Record<PlainStatus, number> = {
  failed: 0,
  running: 1,
  queued: 2,
  waiting: 3,
  cancelled: 4,
  "not run": 5,
  finished: 6,
  created: 7,
  compensating: 7,
  compensated: 7,
  "compensation failed": 7,
};

export class JobGrid {
  readonly element: HTMLElement;
  private readonly status = h("select", { "data-testid": "grid-status", "aria-label": "Status" });
  private readonly runningNow = h("input", { type: "checkbox", "data-testid": "grid-running-now" });
  private readonly runningLabel = h("span", {}, "running now");
  private readonly name = h("input", {
    type: "search",
    placeholder: "name contains",
    "aria-label": "Job name contains",
    maxlength: 200,
  });
  private readonly summary = h("p", { class: "muted grid-summary", role: "status" });
  private readonly body = h("div", {});
  private readonly more = h("button", { type: "button", class: "small", hidden: true }, `Show ${PAGE} more`);
  private view: FlowView | undefined;
  private shown = PAGE;
  private selected: number | undefined;

  constructor(private readonly onSelect: (jobId: number) => void) {
    const redraw = () => {
      this.shown = PAGE;
      if (this.view) this.draw(this.view);
    };
    this.status.addEventListener("change", redraw);
    this.runningNow.addEventListener("change", redraw);
    this.name.addEventListener("input", redraw);
    this.more.addEventListener("click", () => {
      this.shown += PAGE;
      if (this.view) this.draw(this.view);
    });
    this.element = h(
      "div",
      { class: "job-grid", "data-testid": "job-grid" },
      h(
        "div",
        { class: "toolbar grid-filters" },
        h("label", {}, "Status ", this.status),
        h("label", { class: "check" }, this.runningNow, " ", this.runningLabel),
        this.name,
      ),
      this.summary,
      this.body,
      this.more,
    );
  }

  /** Draws the table again from the view, with the filters as they are set. */
  draw(view: FlowView): void {
    this.view = view;
    this.drawFilters(view);
    const word = this.status.value as PlainStatus | "";
    const runningNow = this.runningNow.checked;
    const needle = this.name.value.trim().toLowerCase();
    const order = new Map(view.jobs.map((job, i) => [job.id, i]));
    const rows = view.jobs
      .map((job) => ({ job, word: jobWords(job).word }))
      .filter((r) => (runningNow ? r.word === "running" : !word || r.word === word))
      .filter((r) => !needle || r.job.key.toLowerCase().includes(needle))
      .sort(
        (a, b) =>
          (runningNow ? 0 : RANK[a.word] - RANK[b.word]) ||
          (a.job.started_at_ms ?? Number.POSITIVE_INFINITY) - (b.job.started_at_ms ?? Number.POSITIVE_INFINITY) ||
          (order.get(a.job.id) ?? 0) - (order.get(b.job.id) ?? 0),
      );
    const drawn = rows.slice(0, this.shown);
    this.summary.textContent =
      rows.length === view.jobs.length
        ? `${view.jobs.length} jobs${drawn.length < rows.length ? `, the first ${drawn.length} shown` : ""}`
        : `${rows.length} of ${view.jobs.length} jobs${drawn.length < rows.length ? `, the first ${drawn.length} shown` : ""}`;
    this.more.hidden = drawn.length >= rows.length;
    // The live table is drawn anew: the keyboard stays on the row it was on.
    const focused = (document.activeElement as HTMLElement | null)?.closest<HTMLElement>("tr[data-job]")?.dataset.job;
    fill(
      this.body,
      rows.length === 0
        ? h("p", { class: "muted" }, "No job matches.")
        : table(
            ["Job", "Status", "Attempt", "Started", "Took", "Why"],
            drawn.map(({ job }) => this.row(job)),
          ),
    );
    if (focused) this.body.querySelector<HTMLElement>(`tr[data-job="${focused}"] button`)?.focus();
  }

  /** The status filter's options with their counts, and the count of jobs running now. */
  private drawFilters(view: FlowView): void {
    const counts = new Map(countWords(view.jobs));
    const chosen = this.status.value;
    fill(
      this.status,
      h("option", { value: "" }, `every status (${view.jobs.length})`),
      ...JOB_WORDS.map((word) =>
        h(
          "option",
          { value: word, ...(word === chosen ? { selected: true } : {}) },
          `${word} (${counts.get(word) ?? 0})`,
        ),
      ),
    );
    this.status.value = chosen;
    this.status.disabled = this.runningNow.checked;
    this.runningLabel.textContent = `running now (${counts.get("running") ?? 0})`;
  }

  private row(job: JobView): HTMLTableRowElement {
    const words = jobWords(job);
    const open = h("button", { type: "button", class: "link" }, job.key);
    open.addEventListener("click", () => this.onSelect(job.id));
    const running = job.status === "started";
    const took =
      job.started_at_ms === undefined || (!running && job.ended_at_ms === undefined)
        ? "—"
        : durationElement(job.started_at_ms, running ? undefined : job.ended_at_ms);
    const why = words.why ?? (job.status !== "finished" ? job.waiting?.detail : undefined) ?? "";
    return h(
      "tr",
      { "data-job": job.id, "data-status": job.status, class: this.selected === job.id ? "selected" : undefined },
      h("td", {}, open, " ", h("small", { class: "muted" }, `#${job.id}`)),
      h("td", {}, plainBadge(words)),
      h("td", { class: "num" }, job.attempt === 0 ? "—" : String(job.attempt)),
      h("td", {}, job.started_at_ms === undefined ? "—" : timeElement(Math.floor(job.started_at_ms / 1000))),
      h("td", { class: "num" }, took),
      h("td", { class: "reason" }, why),
    );
  }

  /** Marks the row of the job whose panel is open. */
  select(jobId: number | undefined): void {
    this.selected = jobId;
    for (const row of this.body.querySelectorAll<HTMLElement>("tr[data-job]"))
      row.classList.toggle("selected", row.dataset.job === String(jobId));
  }
}
