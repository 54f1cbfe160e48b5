import type { DeadLetter, Page, Runner, RunnerWithDispatch } from "../../../shared/model/index.js";
import { describeError } from "../api.js";
import { ageElement, fill, h, table, timeElement } from "../dom.js";
import { every, type PageContext } from "../page.js";
import { href } from "../routes.js";
import { contextHeader } from "./context-header.js";

/** At most this many runners are read one by one for their load (each is a request). */
const RUNNERS_READ = 100;

/** A runner's health as dispatch sees it: delivering fine, or failing since when and why. */
function health(runner: RunnerWithDispatch): HTMLElement {
  const d = runner.dispatch;
  if (!d.last_error) return h("span", { class: "badge st-finished" }, "healthy");
  return h(
    "div",
    {},
    h("span", { class: "badge st-error" }, `failing${d.failures ? ` ×${d.failures}` : ""}`),
    h("div", { class: "reason" }, d.last_error),
    d.retry_at !== undefined ? h("div", { class: "muted" }, "tried again at ", timeElement(d.retry_at)) : undefined,
  );
}

/** In-flight attempts against the runner's concurrency, as a meter and in words. */
function load(runner: RunnerWithDispatch): HTMLElement {
  const { in_flight } = runner.dispatch;
  return h(
    "div",
    { class: "load" },
    h("meter", { min: 0, max: runner.concurrency, value: in_flight, "aria-label": `runner ${runner.id} load` }),
    ` ${in_flight} / ${runner.concurrency}`,
  );
}

/** How jobs reach the runner: pulled, or pushed to its address (several a POST, if it takes them). */
function reachedAt(runner: Runner): (HTMLElement | string)[] {
  if (runner.local) return ["pull (local)"];
  const perPost =
    runner.deliveries_per_post > 1 ? [h("span", { class: "muted" }, ` · ${runner.deliveries_per_post} a POST`)] : [];
  return [h("code", {}, runner.address), ...perPost];
}

/** A context's runners: how each is reached, what it runs, its load now and its health; read every 5 s. */
export function runnersPage(ctx: PageContext, contextId: number): void {
  const { api, main, signal } = ctx;
  const body = h("div", {}, h("p", { class: "muted" }, "Loading…"));
  const refresh = async () => {
    try {
      const page = await api.get<Page<Runner>>(`/v1/contexts/${contextId}/runners?limit=${RUNNERS_READ}`);
      const runners = await Promise.all(
        page.items.map((r) => api.get<RunnerWithDispatch>(`/v1/contexts/${contextId}/runners/${r.id}`)),
      );
      if (signal.aborted) return;
      const row = (r: RunnerWithDispatch) =>
        h(
          "tr",
          { "data-runner": r.id },
          h("td", {}, `Runner ${r.id}`),
          h("td", {}, ...reachedAt(r)),
          h("td", {}, r.script_types.join(", ")),
          h("td", {}, load(r)),
          h("td", {}, health(r)),
          h("td", {}, ageElement(r.created_at)),
        );
      fill(
        body,
        runners.length === 0
          ? h(
              "p",
              {},
              "No runner is registered in this context. ",
              h("code", {}, "flowc runner register"),
              " adds one.",
            )
          : table(["Runner", "Reached at", "Runs", "In flight", "Health", "Registered"], runners.map(row)),
        page.total > RUNNERS_READ
          ? h("p", { class: "muted" }, `The first ${RUNNERS_READ} of ${page.total} runners.`)
          : undefined,
      );
    } catch (error) {
      body.replaceChildren(h("p", { class: "form-error" }, `Cannot list runners: ${describeError(error)}`));
    }
  };
  main.replaceChildren(contextHeader(ctx, contextId, "runners"), body);
  void refresh();
  every(5_000, signal, refresh);
}

/** A context's dead letters, newest first: what the coordinator gave up on, and why. */
export function deadLettersPage(ctx: PageContext, contextId: number): void {
  const { api, main } = ctx;
  const body = h("div", {}, h("p", { class: "muted" }, "Loading…"));
  const more = h("button", { type: "button", hidden: true }, "Older dead letters");
  const letters: DeadLetter[] = [];
  let offset = 0;
  const row = (d: DeadLetter) =>
    h(
      "tr",
      {},
      h("td", {}, timeElement(d.at)),
      h("td", {}, d.kind),
      h(
        "td",
        {},
        d.flow_id > 0
          ? h(
              "a",
              { href: href({ page: "flow", contextId, flowId: d.flow_id, ...(d.job_id ? { jobId: d.job_id } : {}) }) },
              `Flow ${d.flow_id}`,
            )
          : "—",
      ),
      h("td", {}, d.job_key ?? (d.job_id !== undefined ? `#${d.job_id}` : "—")),
      h("td", { class: "num" }, String(d.attempts)),
      h("td", { class: "reason" }, d.reason, d.payload ? h("pre", {}, d.payload) : undefined),
    );
  const read = async () => {
    try {
      const page = await api.get<Page<DeadLetter>>(`/v1/contexts/${contextId}/deadletters?offset=${offset}&limit=50`);
      letters.push(...page.items);
      offset = page.next ?? offset;
      more.hidden = page.next === undefined;
      body.replaceChildren(
        letters.length === 0
          ? h("p", {}, "No dead letters: nothing was given up on.")
          : table(["When", "Kind", "Flow", "Job", "Attempts", "Reason"], letters.map(row)),
      );
    } catch (error) {
      body.replaceChildren(h("p", { class: "form-error" }, `Cannot list dead letters: ${describeError(error)}`));
    }
  };
  more.addEventListener("click", () => void read());
  main.replaceChildren(contextHeader(ctx, contextId, "deadletters"), body, more);
  void read();
}
