import type { FlowView, JobView, Log, Message, RunnerJob } from "../../../shared/model/index.js";
import { describeError, type Api } from "../api.js";
import { durationElement, fill, formatDuration, h, table, timeElement } from "../dom.js";
import { NEEDS_MEANING } from "../job-text.js";
import { href } from "../routes.js";
import { jobWords, plainBadge } from "../status-words.js";

/** How many stderr lines the panel shows above the logs: what a failed script said last. */
const STDERR_TAIL = 20;
/** How many of a job's latest attempts are listed (each is one message to read). */
const ATTEMPTS_SHOWN = 5;

function logLine(line: Log): HTMLElement {
  const at = new Date(line.timestamp * 1000);
  return h(
    "div",
    { class: `log ${line.stream}` },
    h("time", { datetime: at.toISOString() }, at.toLocaleTimeString()),
    " ",
    h("span", { class: "stream" }, line.stream),
    " ",
    line.message,
  );
}

/**
 * The panel of one job: its live state from the flow's view (status, attempt, runner, why it
 * waits, result, error) and, read from the job's record and its attempts' messages, the timings
 * of each attempt, the tail of its stderr and its logs. The logs live on each attempt's message
 * (`message_base + attempt - 1`), as `flowc` reads them; `job.logs` events append to them live.
 */
export class JobPanel {
  readonly element: HTMLElement;
  private jobId: number | undefined;
  private logs: HTMLElement | undefined;
  private stderr: HTMLElement | undefined;
  /** The attempt whose logs are shown (the job's latest). */
  private shownAttempt = 0;
  /** Bumped on every load, so an older answer arriving late never overwrites a newer one. */
  private generation = 0;
  /** What the shown job's state was when last drawn: the panel is drawn again only when it changes. */
  private drawn = "";

  constructor(
    private readonly api: Api,
    private readonly contextId: number,
    private readonly onClose: (jobId: number) => void,
    /** Asked to re-run the flow from the shown job (offered once the flow ended). */
    private readonly onRerunFrom: (jobId: number) => void,
  ) {
    this.element = h("aside", { class: "job-panel", "aria-label": "Job", hidden: true });
  }

  get current(): number | undefined {
    return this.jobId;
  }

  /** Shows a job (or refreshes the one shown) from the flow's view. */
  show(view: FlowView, jobId: number): void {
    const job = view.jobs.find((j) => j.id === jobId);
    if (!job) return;
    const first = this.jobId !== jobId;
    const state = JSON.stringify([
      view.status,
      view.run,
      job.status,
      job.attempt,
      job.runner_id,
      job.delivery,
      job.waiting,
      job.error,
      job.wait,
      job.sleep_until,
      job.skip_reason,
    ]);
    if (!first && state === this.drawn) return;
    this.drawn = state;
    this.jobId = jobId;
    this.element.hidden = false;
    if (first) {
      this.logs = undefined;
      this.stderr = undefined;
      this.shownAttempt = 0;
    }
    void this.load(view, job, first);
  }

  /** Draws the shown job again even if it did not change (a re-run refused: its button again). */
  redraw(view: FlowView): void {
    if (this.jobId === undefined) return;
    this.drawn = "";
    this.show(view, this.jobId);
  }

  hide(): void {
    this.jobId = undefined;
    this.drawn = "";
    this.generation++;
    this.element.hidden = true;
    this.element.replaceChildren();
  }

  /** Appends log lines that just arrived (a `job.logs` event of the job's shown attempt). */
  appendLogs(jobId: number, attempt: number | undefined, lines: Log[]): void {
    if (jobId !== this.jobId || (attempt !== undefined && attempt !== this.shownAttempt)) return;
    this.logs?.append(...lines.map(logLine));
    const errors = lines.filter((l) => l.stream === "stderr");
    if (this.stderr && errors.length > 0) {
      this.stderr.append(...errors.map((l) => `${l.message}\n`));
      const text = (this.stderr.textContent ?? "").split("\n").filter(Boolean);
      this.stderr.textContent = `${text.slice(-STDERR_TAIL).join("\n")}\n`;
    }
  }

  private async load(view: FlowView, job: JobView, first: boolean): Promise<void> {
    const generation = ++this.generation;
    const close = h("button", { type: "button", class: "small", "aria-label": "Close the job panel" }, "Close");
    close.addEventListener("click", () => {
      const id = this.jobId;
      this.hide();
      if (id !== undefined) this.onClose(id);
    });
    const heading = h("h2", { id: "job-title", tabindex: -1 }, `Job ${job.key} `, h("small", {}, `#${job.id}`));
    const details = h("div", { class: "job-details" }, h("p", { class: "muted" }, "Loading attempts…"));
    // Drawn again as the job moves on: the logs stay open (or closed) as the viewer left them.
    const logsOpen = first ? undefined : this.element.querySelector<HTMLDetailsElement>("details.logs-box")?.open;
    this.element.setAttribute("aria-labelledby", "job-title");
    fill(
      this.element,
      h("div", { class: "panel-head" }, heading, this.rerunButton(view, job), close),
      this.facts(view, job),
      details,
    );
    if (first) heading.focus();

    try {
      const base = `/v1/contexts/${this.contextId}`;
      const record = await this.api.get<RunnerJob>(`${base}/jobs/${view.caller_id}/${job.id}`);
      if (job.kind !== "script") {
        // A wait or a sleep has no attempts on a runner: no messages, no logs, no script.
        if (generation === this.generation) fill(details, noRunnerDetails(record));
        return;
      }
      const messageBase = record.message_base;
      const floor = record.attempt_floor ?? 0;
      const attempts: number[] = [];
      for (let n = job.attempt; n > floor && attempts.length < ATTEMPTS_SHOWN; n--) attempts.unshift(n);
      const messages =
        messageBase === undefined
          ? []
          : await Promise.all(
              attempts.map((n) => this.api.get<Message>(`${base}/messages/${view.caller_id}/${messageBase + n - 1}`)),
            );
      if (generation !== this.generation) return;
      this.shownAttempt = messages.at(-1)?.attempt ?? 0;
      fill(details, ...this.attemptDetails(job, record, messages, logsOpen));
    } catch (error) {
      if (generation !== this.generation) return;
      fill(details, h("p", { class: "form-error" }, `Cannot read the job's attempts: ${describeError(error)}`));
    }
  }

  /** "Re-run from here", once the flow ended: the job and everything downstream of it run again. */
  private rerunButton(view: FlowView, job: JobView): HTMLElement | undefined {
    if (view.status !== "finished" && view.status !== "error") return undefined;
    const title = `Runs ${job.key} and every job downstream of it again, as run ${view.run + 1}; the others keep their results`;
    const button = h("button", { type: "button", class: "small", title }, "Re-run from here");
    button.addEventListener("click", () => {
      button.disabled = true;
      this.onRerunFrom(job.id);
    });
    return button;
  }

  /** What the flow's view says of the job. */
  private facts(view: FlowView, job: JobView): HTMLElement {
    const keyOf = (id: number) => view.jobs.find((j) => j.id === id)?.key ?? `#${id}`;
    const fact = (term: string, value: Node | string) => [h("dt", {}, term), h("dd", {}, value)];
    const runner =
      job.runner_id === undefined
        ? "—"
        : h("a", { href: href({ page: "runners", contextId: this.contextId }) }, `runner ${job.runner_id}`);
    const script = job.kind === "script";
    return h(
      "div",
      {},
      h(
        "dl",
        { class: "facts" },
        ...fact("Status", plainBadge(jobWords(job), { "data-testid": "job-status" })),
        ...(job.skip_reason !== undefined
          ? fact("Skipped", h("span", { "data-testid": "skip-reason" }, job.skip_reason || "by its flow's rules"))
          : []),
        ...(job.compensates !== undefined
          ? fact(
              "Undoes",
              h("span", { "data-testid": "job-undoes" }, `${keyOf(job.compensates)} (if the flow unwinds)`),
            )
          : []),
        ...(script ? fact("Script", job.script_type ?? "—") : fact("Kind", kindText(job))),
        ...(job.wait ? fact("Waits for", h("span", { "data-testid": "job-wait" }, waitText(job.wait))) : []),
        ...(job.sleep_until !== undefined ? fact("Sleeps until", timeElement(job.sleep_until)) : []),
        ...(job.flow
          ? fact("Starts", `template ${job.flow.template}${job.flow.version ? ` version ${job.flow.version}` : ""}`)
          : []),
        ...(job.child_flow_id !== undefined
          ? fact(
              "Child flow",
              h(
                "a",
                {
                  "data-testid": "child-flow",
                  href: href({ page: "flow", contextId: this.contextId, flowId: job.child_flow_id }),
                },
                `flow ${job.child_flow_id}`,
              ),
            )
          : []),
        ...(script ? fact("Attempt", job.attempt === 0 ? "not dispatched yet" : String(job.attempt)) : []),
        ...(script ? fact("Runner", runner) : []),
        ...(job.delivery ? fact("Delivery", job.delivery) : []),
        ...(job.started_at !== undefined ? fact("Started", timeElement(job.started_at)) : []),
        ...(job.started_at_ms !== undefined ? fact("Ran", durationElement(job.started_at_ms, job.ended_at_ms)) : []),
        ...(job.heartbeat_at !== undefined ? fact("Heartbeat", timeElement(job.heartbeat_at)) : []),
        ...(job.waiting ? fact("Waiting", waitingText(job.waiting)) : []),
        ...(job.depends.length > 0 ? fact("Depends on", job.depends.map(keyOf).join(", ")) : []),
        ...(job.instances ? fact("Instances", `${job.instances.length}: ${job.instances.map(keyOf).join(", ")}`) : []),
        ...(job.map_of !== undefined ? fact("Instance of", `${keyOf(job.map_of)}, item ${job.item_index ?? "?"}`) : []),
        ...(job.added_by !== undefined ? fact("Added by", `${keyOf(job.added_by)}'s result`) : []),
      ),
      rulesSection(job),
      job.error
        ? h("section", {}, h("h3", {}, "Error"), h("pre", { class: "error", "data-testid": "job-error" }, job.error))
        : undefined,
      job.result && Object.keys(job.result).length > 0
        ? h(
            "section",
            {},
            h("h3", {}, job.kind === "wait" ? "Result (the event's data)" : "Result"),
            table(
              ["Key", "Value"],
              Object.entries(job.result).map(([k, v]) => h("tr", {}, h("td", {}, k), h("td", {}, h("code", {}, v)))),
            ),
          )
        : undefined,
    );
  }

  /** Each attempt's timings, the latest attempt's stderr tail and logs, and the script. */
  private attemptDetails(
    job: JobView,
    record: RunnerJob,
    messages: Message[],
    logsOpen: boolean | undefined,
  ): (HTMLElement | undefined)[] {
    const latest = messages.at(-1);
    const stderrLines = (latest?.logs ?? []).filter((l) => l.stream === "stderr").map((l) => l.message);
    this.stderr = h("pre", { class: "stderr", "data-testid": "stderr" }, stderrLines.slice(-STDERR_TAIL).join("\n"));
    this.logs = h("div", { class: "logs", "data-testid": "logs" }, ...(latest?.logs ?? []).map(logLine));
    const took = (m: Message) => (m.ended_at !== undefined ? formatDuration(m.ended_at - m.created_at) : "—");
    const attemptRow = (m: Message) =>
      h(
        "tr",
        {},
        h("td", { class: "num" }, String(m.attempt ?? "?")),
        h("td", {}, m.runner_id === undefined ? "—" : `runner ${m.runner_id}`),
        h("td", {}, m.status),
        h("td", {}, timeElement(m.created_at)),
        h("td", {}, timeElement(m.ended_at)),
        h("td", {}, took(m)),
      );
    return [
      h(
        "section",
        {},
        h("h3", {}, `stderr${latest ? ` of attempt ${latest.attempt ?? "?"}` : ""} (last ${STDERR_TAIL} lines)`),
        stderrLines.length > 0 || latest ? this.stderr : h("p", { class: "muted" }, "No attempt yet."),
      ),
      h(
        "section",
        {},
        h("h3", {}, "Attempts"),
        messages.length === 0
          ? h("p", { class: "muted" }, "Not dispatched yet.")
          : table(["#", "Runner", "Message", "Dispatched", "Ended", "Took"], messages.map(attemptRow)),
        h("p", { class: "muted" }, `Up to ${record.retries + 1} attempt(s) per run; timeout ${record.timeout} s.`),
      ),
      h(
        "details",
        { class: "logs-box", open: logsOpen ?? (job.status === "started" || job.status === "error") },
        h(
          "summary",
          {},
          `Logs${latest ? ` of attempt ${latest.attempt ?? "?"}` : ""} (${latest?.logs.length ?? 0} lines)`,
        ),
        this.logs,
      ),
      h(
        "details",
        {},
        h("summary", {}, `Script (${record.script_type})`),
        h("pre", { class: "script" }, record.script),
      ),
    ];
  }
}

/** What a job that runs no script does. */
function kindText(job: JobView): string {
  if (job.kind === "map")
    return `map over ${job.map?.over ?? "?"}: its instances run its ${job.script_type ?? ""} script`;
  return job.kind === "wait" ? "wait for an event (takes no runner)" : "sleep (takes no runner)";
}

/** A wait's event and key, and its timeout: `order.paid with key "42", times out after 1 h 00 min`. */
function waitText(wait: NonNullable<JobView["wait"]>): string {
  const key = wait.key === "" ? " (any key)" : ` with key ${JSON.stringify(wait.key)}`;
  return `${wait.event}${key}${wait.timeout > 0 ? `, times out after ${formatDuration(wait.timeout)}` : ""}`;
}

/** Why a job is not running yet, and until when (a wait's timeout, a sleep's end, a backoff's). */
function waitingText(waiting: NonNullable<JobView["waiting"]>): HTMLElement {
  const until = waiting.until;
  const ends = waiting.reason === "event" ? ", times out at " : " until ";
  return h(
    "span",
    { "data-testid": "job-waiting" },
    `${waiting.reason}: ${waiting.detail}`,
    until !== undefined ? ends : "",
    until !== undefined ? timeElement(until) : "",
  );
}

/** The job's rules (`when`, `needs`, `allow_failure`), each with what it means. */
function rulesSection(job: JobView): HTMLElement | undefined {
  if (job.when === undefined && job.needs === undefined && !job.allow_failure) return undefined;
  const rule = (term: string, value: Node | string, meaning: string) => [
    h("dt", {}, term),
    h("dd", {}, value, h("div", { class: "muted" }, meaning)),
  ];
  return h(
    "section",
    { "data-testid": "job-rules" },
    h("h3", {}, "Rules"),
    h(
      "dl",
      { class: "facts" },
      ...(job.when !== undefined
        ? rule("when", h("code", {}, job.when), "runs only when this is true (else it is skipped)")
        : []),
      ...(job.needs !== undefined ? rule("needs", h("code", {}, job.needs), NEEDS_MEANING[job.needs]) : []),
      ...(job.allow_failure ? rule("allow_failure", h("code", {}, "true"), "its error does not fail the flow") : []),
    ),
  );
}

/** A wait's or a sleep's record: its timeout and what a timeout does, or how long it sleeps. */
function noRunnerDetails(record: RunnerJob): HTMLElement {
  const fact = (term: string, value: string) => [h("dt", {}, term), h("dd", {}, value)];
  if (record.map)
    return h(
      "section",
      {},
      h("h3", {}, "Map"),
      h("dl", { class: "facts" }, ...fact("Over", record.map.over), ...fact("Retries", String(record.retries))),
      h("p", { class: "muted" }, "Each instance runs this script with its item in ITEM (and its place in ITEM_INDEX)."),
      h("pre", { class: "script" }, record.script),
    );
  const wait = record.wait;
  if (wait) {
    return h(
      "section",
      {},
      h("h3", {}, "Wait"),
      h(
        "dl",
        { class: "facts" },
        ...fact("Event", wait.event),
        ...fact("Key, as written", wait.key === "" ? "(any)" : wait.key),
        ...fact("Timeout", formatDuration(wait.timeout)),
        ...fact("On timeout", wait.on_timeout === "skip" ? "skipped" : "error"),
      ),
      h("p", { class: "muted" }, "An event sent to this context with this name and key ends it (flowc event send)."),
    );
  }
  return h(
    "section",
    {},
    h("h3", {}, "Sleep"),
    h(
      "dl",
      { class: "facts" },
      ...(record.sleep !== undefined ? fact("Sleeps", formatDuration(record.sleep)) : []),
      ...(record.sleep_until !== undefined ? fact("Sleeps until", record.sleep_until) : []),
    ),
  );
}
