import type { FlowView, JobView } from "../../shared/model/index.js";
import type { Condition, FlowPlan, Job } from "./shapes.js";

// How a flow of the soak must have ended, judged from its final view against its plan: each job
// by its own rules (its `needs` over how its dependencies ended, its `when`, what it is), the flow
// by its jobs. Independent of the coordinator's code: `needs` and `when` are evaluated here again.

const ENDED = new Set(["finished", "error", "skipped"]);

/** What a job's rules said once its dependencies ended as they did: run it, or skip it. */
function verdict(job: Job, deps: JobView[]): "run" | "skip" | "pending" {
  if (deps.length === 0) return "run";
  const ended = deps.every((d) => ENDED.has(d.status));
  switch (job.needs ?? "all_finished") {
    case "all_finished":
      if (deps.some((d) => ENDED.has(d.status) && d.status !== "finished")) return "skip";
      return ended ? "run" : "pending";
    case "all_done":
      return ended ? "run" : "pending";
    case "any_finished":
      if (deps.some((d) => d.status === "finished")) return "run";
      return ended ? "skip" : "pending";
    case "none_failed":
      if (deps.some((d) => d.status === "error")) return "skip";
      return ended ? "run" : "pending";
  }
}

/** Whether a `when` held over the final view (results and statuses do not change once ended); undefined: it could not be evaluated. */
function holds(c: Condition | undefined, view: FlowView, plan: FlowPlan): boolean | undefined {
  if (!c) return true;
  if (c.on === "env") return plan.env[c.name] === c.equals;
  const dep = view.jobs.find((j) => j.key === c.dep);
  if (c.on === "status") return dep?.status === c.equals;
  const value = dep?.result?.[c.field];
  return value === undefined ? undefined : value === c.equals;
}

/**
 * The problems of one flow's end, each a sentence naming the flow and the job:
 * - each job is shown with the kind and rules it was submitted with;
 * - a job that finished ran when its rules let it, and is no doomed script;
 * - a skipped job was skipped by its rules (`needs` could not be met, its `when` was false) or is
 *   a wait that timed out with `on_timeout: skip`;
 * - a child-flow job is shown as one; it finishes only if its child does not fail on purpose, and
 *   fails with a child that does (`child flow <id> failed: …`), which may fail its flow;
 * - a job in error is a doomed script, a wait that timed out (`on_timeout: error`), a `when` that
 *   could not be evaluated, or, the flow having failed, a job its failure stopped or an attempt in
 *   flight then that a fault ended (it is not retried);
 * - a clean-up (a script with `needs: all_done`, no `when`) finished, the flow failed or not
 *   (unless it was cancelled);
 * - a finished flow has every job ended and none in error that may not fail; a flow that failed
 *   names a job in error that may not fail, and which failed as it may (`legitFailure`), or was
 *   cancelled as planned (its jobs not ended then end `cancelled: …`);
 * - a flow that failed ends `error` without compensations, else unwound (`compensated` or
 *   `compensation_failed`: its compensations are judged in sagas.ts).
 */
export function judgeFlow(
  plan: FlowPlan,
  view: FlowView,
  legitFailure: (job: JobView, planned: Job) => boolean,
): string[] {
  const wrong: string[] = [];
  const byName = new Map(view.jobs.map((j) => [j.key, j]));
  const say = (job: string, what: string) => wrong.push(`flow ${view.id} ${view.status}: job ${job} ${what}`);
  const failed = FAILED.has(view.status);
  const cancelled = failed && view.error?.job === 0 && plan.cancel !== undefined;
  // Jobs a result added are judged as the flow's own (whether they joined: growth.ts).
  for (const planned of [...plan.jobs, ...(plan.added ?? [])]) {
    const name = planned.name as string;
    const job = byName.get(name);
    if (!job) {
      if (!plan.added?.includes(planned)) say(name, "is not in its view");
      continue;
    }
    const kind = planned.wait
      ? "wait"
      : planned.flow
        ? "flow"
        : planned.map
          ? "map"
          : planned.script !== undefined
            ? "script"
            : "sleep";
    const shown = [job.kind, job.needs ?? "all_finished", job.allow_failure ?? false, job.when ?? "-"].join(" ");
    const meant = [kind, planned.needs ?? "all_finished", planned.allow_failure ?? false, planned.when ?? "-"].join(
      " ",
    );
    if (shown !== meant) say(name, `is shown as ${shown}, submitted as ${meant} (kind, needs, allow_failure, when)`);
    const deps = (planned.depends ?? []).map((d) => byName.get(String(d)) as JobView);
    const rules = verdict(planned, deps);
    const when = holds(plan.conditions[name], view, plan);
    const runs = rules === "run" && when === true;
    const doomed = plan.doomed.includes(name);
    const reason = job.error ?? job.skip_reason ?? "";
    // A child-flow job whose child fails on purpose fails with it (templates.ts).
    const childFailed = failsWithChild(plan, name, reason);
    const timedOut = planned.wait !== undefined && /^timed out: no event/.test(reason);
    const stopped =
      (failed && /^(not run|stopped|not retried)[: ]/.test(reason)) || (cancelled && /^cancelled: /.test(reason));
    switch (job.status) {
      case "finished":
        // A doomed map allowed to fail finishes, its failed instances' results null; over an
        // empty list, it finishes at once, nothing having run.
        if (
          !runs ||
          (doomed && !(planned.map && (planned.allow_failure || emptyMap(plan, name)))) ||
          childFails(plan, name)
        )
          say(name, `finished, but its rules ${rules}, its when ${when}${doomed ? ", doomed" : ""}`);
        break;
      case "skipped": {
        const byRules = rules === "skip" || (rules === "run" && when === false);
        const byTimeout = timedOut && planned.wait?.on_timeout === "skip";
        if (!byRules && !byTimeout) say(name, `skipped (${reason}), but its rules ${rules}, its when ${when}`);
        break;
      }
      case "error": {
        const byOwnEnd =
          runs &&
          ((doomed && planned.script !== undefined) ||
            (timedOut && planned.wait?.on_timeout !== "skip") ||
            childFailed);
        const whenFailed = rules === "run" && when === undefined && /^when could not be evaluated/.test(reason);
        // A map whose instance was stopped (the flow failed) or refused its added jobs on purpose.
        const grew = (planned.map && failed && /^instance /.test(reason)) || plan.refusedGrowth === true;
        // An attempt in flight when the flow failed is not retried: a fault may end it.
        const notRetried = failed && planned.script !== undefined && /^attempt \d+ /.test(reason);
        if (!byOwnEnd && !whenFailed && !stopped && !notRetried && !grew)
          say(name, `ended in error (${reason}), but its rules ${rules}, its when ${when}`);
        break;
      }
      default:
        say(name, `did not end: ${job.status}`);
    }
    const cleanup = planned.needs === "all_done" && planned.script !== undefined && !plan.conditions[name];
    if (cleanup && !doomed && !cancelled && job.status !== "finished")
      say(name, `is a clean-up (needs: all_done) and did not finish: ${job.status} (${reason})`);
  }
  const mayFail = new Set(plan.jobs.filter((j) => j.allow_failure).map((j) => j.name as string));
  // A map's instance may fail as its map may.
  const keyOf = new Map(view.jobs.map((j) => [j.id, j.key]));
  const own = (j: JobView) => (j.map_of !== undefined ? (keyOf.get(j.map_of) ?? j.key) : j.key);
  const failing = view.jobs.filter((j) => j.status === "error" && !mayFail.has(own(j)) && j.compensates === undefined);
  if (view.status === "finished" && failing.length > 0)
    wrong.push(`flow ${view.id} finished with ${failing.map((j) => `${j.key} in error (${j.error})`).join(", ")}`);
  if (failed && !cancelled) {
    const named = byName.get(view.error?.name ?? "");
    // A map's instance fails its flow as its map would.
    const map = named?.map_of !== undefined ? view.jobs.find((j) => j.id === named.map_of)?.key : undefined;
    const planned = plan.jobs.find((j) => j.name === (map ?? named?.key));
    const legit = named && planned && (legitFailure(named, planned) || failsWithChild(plan, named.key, named.error));
    if (!named || !planned || planned.allow_failure || named.status !== "error" || !legit)
      wrong.push(
        `flow ${view.id} ${view.status}: ${view.error?.name}: ${view.error?.reason} (no job that may fail it failed so)`,
      );
  }
  const unwinds = plan.compensated.length > 0;
  if (failed && (view.status === "error") === unwinds)
    wrong.push(`flow ${view.id} failed ${view.status}, with ${plan.compensated.length} compensations`);
  if (view.status !== "finished" && !failed) wrong.push(`flow ${view.id} did not end: ${view.status}`);
  return wrong;
}

/** The statuses of a flow that failed: in error, or unwound. */
const FAILED: ReadonlySet<string> = new Set(["error", "compensated", "compensation_failed"]);

/** Whether a job is a map of the plan over an empty list (growth.ts): it finishes without an instance. */
function emptyMap(plan: FlowPlan, name: string): boolean {
  return plan.maps?.some((m) => m.job === name && m.items === 0) === true;
}

/** Whether a job of the plan is a child-flow job whose child fails on purpose. */
function childFails(plan: FlowPlan, name: string): boolean {
  return plan.children?.some((c) => c.job === name && c.fails) === true;
}

/** Whether a job failed as its child flow, which fails on purpose, made it (`child flow <id> failed: …`). */
function failsWithChild(plan: FlowPlan, name: string, reason: string | undefined): boolean {
  return childFails(plan, name) && /^child flow \d+ failed: /.test(reason ?? "");
}

/**
 * How a job that may fail its flow (`flowId`) failed as it may: a doomed script on purpose (or by
 * a fault), a wait by its timeout. A doomed job's last attempt may end by a fault instead of by
 * its own failure: its runner was killed holding it (it went silent), or never took it. That is a
 * right ending only if no runner had its failure answered (`outputs`: the runners' lines): an
 * answered report the flow then ignored would be a bug.
 */
export function failedAsItMay(outputs: string, flowId: number): (job: JobView, planned: Job) => boolean {
  const endedByFault = (job: string, reason: string) => {
    const attempt = /^attempt (\d+) (went silent|was not delivered)/.exec(reason)?.[1];
    if (!attempt) return false;
    const answered = new RegExp(`^answered result ${escaped(job)} flow ${flowId} attempt ${attempt} 200`, "m");
    return !answered.test(outputs);
  };
  return (job, planned) => {
    const reason = job.error ?? "";
    if (planned.wait) return planned.wait.on_timeout !== "skip" && /^timed out: no event/.test(reason);
    // A job whose result adds jobs refused on purpose fails saying so (growth.ts).
    if (/^its added jobs were refused: /.test(reason)) return true;
    // A doomed map's instance (`<map>-doomed[i]`) fails as the map would.
    return /-doomed(\[\d+\])?$/.test(job.key) && (/failed on purpose/.test(reason) || endedByFault(job.key, reason));
  };
}

/** A text as a regular expression that matches it literally. */
function escaped(text: string): string {
  return text.replace(/[.*+?^${}()|[\]\\]/g, "\\$&");
}
