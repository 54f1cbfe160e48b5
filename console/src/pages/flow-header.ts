import type { FlowView } from "../../../shared/model/index.js";
import { durationElement, fill, h, timeElement } from "../dom.js";
import { href } from "../routes.js";
import { countWords, flowWords, plainBadge, plainClassOf, plainText } from "../status-words.js";

/*
 * The top of the flow page: its status in plain words, how many of its jobs are in each plain
 * status, its times (how long it ran, ticking while it runs), and why it failed or was cancelled.
 * Everything here is drawn from the page's view of the flow as it is at that moment, the same
 * view the DAG's nodes were just drawn from: the counts never tell another story than the nodes.
 */

/** The flow's status as a badge (a cancelled flow says cancelled, not error). */
export function statusBadge(view: FlowView): HTMLElement {
  return plainBadge(flowWords(view), { "data-status": view.status });
}

/** Why the flow failed: the job at fault and its reason, or that it was cancelled; the compensations that failed. */
export function failureNote(view: FlowView): HTMLElement | undefined {
  const error = view.error;
  if (!error) return undefined;
  const failed = error.failed_compensations?.length
    ? ` Compensations that failed: ${error.failed_compensations.join(", ")} (re-run runs them again).`
    : "";
  // Job 0 is the flow itself: its reason says what happened (a cancel, its deadline), said once.
  const text =
    error.job === 0 ? capital(plainText(flowWords(view))) : `Job ${error.name ?? error.job} failed: ${error.reason}`;
  return h("p", { class: "flow-error", role: "note" }, text, failed);
}

function capital(text: string): string {
  return text.charAt(0).toUpperCase() + text.slice(1);
}

/** The flow's progress (its jobs by plain status), times, trace id, and where it came from. */
export function drawMeta(meta: HTMLElement, view: FlowView): void {
  const counts = countWords(view.jobs).map(([word, n]) =>
    h("span", { class: `count ${plainClassOf(word)}`, "data-word": word }, `${n} ${word}`),
  );
  const started = view.started_at_ms ?? (view.started_at === undefined ? undefined : view.started_at * 1000);
  const ended = view.ended_at_ms ?? (view.ended_at === undefined ? undefined : view.ended_at * 1000);
  fill(
    meta,
    h("span", { class: "progress", "data-testid": "flow-progress" }, `${view.jobs.length} jobs: `, ...counts),
    h("span", {}, "started ", timeElement(view.started_at)),
    view.compensating_at !== undefined
      ? h("span", {}, "unwinding since ", timeElement(view.compensating_at))
      : undefined,
    view.ended_at !== undefined ? h("span", {}, "ended ", timeElement(view.ended_at)) : undefined,
    h("span", { "data-testid": "flow-took" }, "ran ", durationElement(started, ended)),
    view.run > 1
      ? h("span", { "data-testid": "flow-run", title: "re-run: each re-run is the next run" }, `run ${view.run}`)
      : undefined,
    h("span", { class: "trace", title: "trace id (W3C traceparent)" }, `trace ${view.trace_id}`),
    ...origin(view),
  );
}

/** The template the flow was started from, and the flow whose job started it (a child flow). */
function origin(view: FlowView): (HTMLElement | undefined)[] {
  const template = view.template
    ? h(
        "span",
        { "data-testid": "flow-template" },
        "from template ",
        h(
          "a",
          { href: href({ page: "template", contextId: view.context_id, name: view.template.name }) },
          view.template.name,
        ),
        ` version ${view.template.version}`,
      )
    : undefined;
  if (!view.parent) return [template];
  const parent = { page: "flow", contextId: view.context_id, flowId: view.parent.flow_id } as const;
  return [
    template,
    h(
      "span",
      { "data-testid": "flow-parent" },
      "child of ",
      h("a", { href: href({ ...parent, jobId: view.parent.job_id }) }, `flow ${view.parent.flow_id}`),
      ` (job ${view.parent.job_id})`,
    ),
  ];
}
