import type { Context, Page, ScheduleRun, ScheduleSummary, ScheduleView } from "../../../shared/model/index.js";
import { cronWords, scheduleWords } from "../../../shared/model/cron-words.js";
import { describeError } from "../api.js";
import { fill, formatDuration, h, notify, table, timeElement } from "../dom.js";
import { every, type PageContext } from "../page.js";
import { href } from "../routes.js";
import { contextHeader } from "./context-header.js";
import { rolesOf } from "./contexts.js";

/*
 * A context's schedules (docs/schedules.md): the list, with each schedule's cron read out in words
 * and its next fire; one schedule with its coming fires, its recent runs linked to their flows,
 * and, for admins, Pause / Resume and Trigger now. Schedules are created with flowc or the API.
 */

/** How often the pages read again: fires come by the minute at the most, a trigger by hand is shown at once. */
const REFRESH_MS = 5_000;

/** The list reads this many schedules (one request; the records only, no object is asked). */
const SCHEDULES_READ = 500;

/** When a schedule fires: the words, with the expression as written beneath. */
function when(s: ScheduleSummary): HTMLElement {
  const words = scheduleWords(s);
  const expression =
    s.cron !== undefined
      ? h("code", {}, s.cron, s.timezone ? ` (${s.timezone})` : "")
      : h("code", {}, `every ${s.interval_seconds} s`);
  // An expression the reader does not read is shown once, as it is.
  if (s.cron !== undefined && cronWords(s.cron, s.timezone) === undefined) return h("div", {}, expression);
  return h(
    "div",
    { class: "when" },
    h("span", { "data-testid": "cron-words" }, words),
    h("div", { class: "muted" }, expression),
  );
}

/** A schedule's state as a badge: active, or paused (and why, when the coordinator paused it). */
function status(s: ScheduleSummary): HTMLElement {
  return h("span", { class: `badge ${s.paused ? "st-paused" : "st-running"}`, title: s.paused_reason ?? "" }, s.status);
}

/** "in 4 min 10 s" for a time to come. */
function fromNow(epochSeconds: number): string {
  const seconds = Math.round(epochSeconds - Date.now() / 1000);
  return seconds <= 0 ? "due now" : `in ${formatDuration(seconds)}`;
}

/** A context's schedules by id: when each fires (in words), its state, next and last fire; read every few seconds. */
export function schedulesPage(ctx: PageContext, contextId: number): void {
  const { api, main, signal } = ctx;
  const body = h("div", {}, h("p", { class: "muted" }, "Loading…"));
  const row = (s: ScheduleSummary) =>
    h(
      "tr",
      { "data-schedule": s.id },
      h(
        "td",
        {},
        h("a", { href: href({ page: "schedule", contextId, scheduleId: s.id }) }, `Schedule ${s.id}`),
        s.note ? h("div", { class: "muted" }, s.note) : undefined,
      ),
      h("td", {}, when(s)),
      h("td", {}, status(s)),
      h("td", {}, s.paused || s.next_fire_at === undefined ? "—" : timeElement(s.next_fire_at)),
      h("td", {}, timeElement(s.last_fire_at)),
      h("td", {}, s.overlap.replaceAll("_", " ")),
    );
  const refresh = async () => {
    try {
      const page = await api.get<Page<ScheduleSummary>>(`/v1/contexts/${contextId}/schedules?limit=${SCHEDULES_READ}`);
      if (signal.aborted) return;
      fill(
        body,
        page.items.length === 0
          ? h("p", {}, "No schedule in this context. ", h("code", {}, "flowc schedule create"), " makes one.")
          : table(["Schedule", "When", "Status", "Next fire", "Last fire", "While one runs"], page.items.map(row)),
        page.total > SCHEDULES_READ
          ? h("p", { class: "muted" }, `The first ${SCHEDULES_READ} of ${page.total} schedules.`)
          : undefined,
      );
    } catch (error) {
      fill(body, h("p", { class: "form-error" }, `Cannot list schedules: ${describeError(error)}`));
    }
  };
  main.replaceChildren(contextHeader(ctx, contextId, "schedules"), body);
  void refresh();
  every(REFRESH_MS, signal, refresh);
}

const OVERLAP: Record<ScheduleSummary["overlap"], string> = {
  skip: "a fire while one of its flows runs is skipped",
  buffer_one: "a fire while one of its flows runs waits for it to end (one waits; more are skipped)",
  allow_all: "every fire starts a flow, running ones or not",
  cancel_other: "a fire cancels the flows still running, then starts",
};

/** What a schedule starts: a flow of its own, or a stored template (linked). */
function starts(contextId: number, s: ScheduleSummary): (Node | string)[] {
  const ref = s.from_template;
  if (!ref) {
    const jobs = Array.isArray(s.template?.jobs) ? s.template.jobs.length : 0;
    return [`a flow of ${jobs} job${jobs === 1 ? "" : "s"} given with the schedule`];
  }
  const version = ref.version !== undefined ? `version ${ref.version}` : "its latest version at each fire";
  return [
    "template ",
    h("a", { href: href({ page: "template", contextId, name: ref.name }) }, ref.name),
    `, ${version}`,
  ];
}

/** The facts of a schedule: when, state, what it starts, its policies, who made it. */
function facts(contextId: number, s: ScheduleView): HTMLElement {
  const fact = (term: string, ...value: (Node | string | undefined)[]) => [h("dt", {}, term), h("dd", {}, ...value)];
  const catchup =
    s.catchup.policy === "skip"
      ? "fires missed while the coordinator was away are skipped"
      : `the last ${s.catchup.max} fires missed while the coordinator was away run`;
  return h(
    "dl",
    { class: "facts" },
    ...fact("When", when(s)),
    ...fact("Status", status(s), s.paused_reason ? h("span", { class: "reason" }, ` ${s.paused_reason}`) : undefined),
    ...fact("Starts", ...starts(contextId, s)),
    ...fact("Overlap", OVERLAP[s.overlap]),
    ...fact("Catch-up", catchup),
    ...fact("Created", timeElement(s.created_at), ` by actor ${s.creator_id}`),
    ...(s.note ? fact("Note", s.note) : []),
  );
}

const OUTCOME_CLASS: Record<ScheduleRun["outcome"], string> = {
  started: "st-running",
  skipped: "st-skipped",
  buffered: "st-paused",
  cancelled_other: "st-started",
  failed: "st-error",
};

/** One run: when it was due, what fired it, what became of it, its flow (linked, and whether it still runs). */
function runRow(contextId: number, run: ScheduleRun, running: Set<number>): HTMLTableRowElement {
  const flow =
    run.flow_id !== undefined
      ? [
          h("a", { href: href({ page: "flow", contextId, flowId: run.flow_id }) }, `Flow ${run.flow_id}`),
          running.has(run.flow_id) ? h("span", { class: "muted" }, " · running") : undefined,
        ]
      : ["—"];
  return h(
    "tr",
    { "data-run-fire": run.fire_at, "data-outcome": run.outcome },
    h("td", {}, timeElement(run.fire_at)),
    h("td", {}, run.trigger),
    h("td", {}, h("span", { class: `badge ${OUTCOME_CLASS[run.outcome]}` }, run.outcome.replaceAll("_", " "))),
    h("td", {}, ...flow),
    h("td", { class: "reason" }, run.reason ?? ""),
  );
}

/** What a trigger did, in one sentence. */
function triggered(run: ScheduleRun): string {
  const flow = run.flow_id !== undefined ? `flow ${run.flow_id}` : "no flow";
  switch (run.outcome) {
    case "started":
      return `Triggered: started ${flow}`;
    case "cancelled_other":
      return `Triggered: cancelled the running flows and started ${flow}`;
    case "buffered":
      return "Triggered: buffered, it starts once the running flow ends";
    default:
      return `Triggered: ${run.outcome}${run.reason ? ` (${run.reason})` : ""}`;
  }
}

/** One schedule: its facts, its coming fires, its recent runs; Pause / Resume and Trigger now for admins. */
export function schedulePage(ctx: PageContext, contextId: number, scheduleId: number): void {
  const { api, main, signal, session } = ctx;
  const base = `/v1/contexts/${contextId}/schedules/${scheduleId}`;
  const body = h("div", {}, h("p", { class: "muted" }, "Loading…"));
  const toggle = h("button", { type: "button", hidden: true }, "Pause");
  const trigger = h("button", { type: "button", hidden: true }, "Trigger now");
  let view: ScheduleView | undefined;

  const show = (v: ScheduleView) => {
    view = v;
    toggle.textContent = v.paused ? "Resume" : "Pause";
    const running = new Set(v.running_flow_ids);
    fill(
      body,
      facts(contextId, v),
      h("h3", {}, "Next fires"),
      v.upcoming_fires.length === 0
        ? h(
            "p",
            { class: "muted" },
            v.paused ? "None while it is paused." : "None: its expression matches no time to come.",
          )
        : h(
            "ol",
            { class: "fires", "data-testid": "upcoming-fires" },
            ...v.upcoming_fires.map((t) =>
              h("li", {}, timeElement(t), h("span", { class: "muted" }, ` · ${fromNow(t)}`)),
            ),
          ),
      h("h3", {}, "Recent runs"),
      v.recent_runs.length === 0
        ? h("p", { class: "muted" }, "It has not fired yet.")
        : table(
            ["Due", "Fired by", "Outcome", "Flow", "Why"],
            v.recent_runs.map((run) => runRow(contextId, run, running)),
          ),
    );
  };
  const refresh = async () => {
    try {
      const v = await api.get<ScheduleView>(base);
      if (!signal.aborted) show(v);
    } catch (error) {
      fill(body, h("p", { class: "form-error" }, `Cannot read schedule ${scheduleId}: ${describeError(error)}`));
    }
  };

  toggle.addEventListener("click", () => {
    const action = view?.paused ? "resume" : "pause";
    toggle.disabled = true;
    api
      .post<ScheduleView>(`${base}/${action}`)
      .then((v) => {
        show(v);
        notify(`Schedule ${scheduleId} ${v.paused ? "paused" : "resumed"}`);
      })
      .catch((error: unknown) => notify(`Cannot ${action} schedule ${scheduleId}: ${describeError(error)}`, "error"))
      .finally(() => (toggle.disabled = false));
  });
  trigger.addEventListener("click", () => {
    trigger.disabled = true;
    api
      .post<ScheduleRun>(`${base}/trigger`)
      .then(async (run) => {
        notify(triggered(run));
        await refresh();
      })
      .catch((error: unknown) => notify(`Cannot trigger schedule ${scheduleId}: ${describeError(error)}`, "error"))
      .finally(() => (trigger.disabled = false));
  });
  // Only admins may pause, resume and trigger: others see the schedule, not buttons that would be refused.
  api
    .get<Context>(`/v1/contexts/${contextId}`)
    .then((context) => {
      const admin = rolesOf(context, session.actorId).includes("admin");
      toggle.hidden = !admin;
      trigger.hidden = !admin;
    })
    .catch(() => undefined);

  main.replaceChildren(
    contextHeader(ctx, contextId, "schedules"),
    h(
      "div",
      { class: "title-row" },
      h("h2", {}, h("a", { href: href({ page: "schedules", contextId }) }, "Schedules"), ` / Schedule ${scheduleId}`),
      toggle,
      trigger,
    ),
    body,
  );
  void refresh();
  every(REFRESH_MS, signal, refresh);
}
