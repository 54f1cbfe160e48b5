import {
  flowTrigger,
  labelsText,
  triggerText,
  type AddedJob,
  type Flow,
  type FlowDag,
  type FlowStreamEvent,
  type FlowView,
  type JobWaiting,
} from "../shared/model/index.js";
import { formatMs } from "../shared/model/durations.js";
import { fields, plural, table, timestamp } from "./output.js";
import { flowWord, flowWords, jobMark, jobWords, type JobFacts } from "./plain.js";

const MAX_VALUE = 40;

/** A result map as `key=value, key=value` (long values cut, so one job stays on one line). */
export function resultText(result: Record<string, string>): string {
  return Object.entries(result)
    .map(([key, value]) => {
      const oneLine = value.replace(/\s+/g, " ");
      return `${key}=${oneLine.length > MAX_VALUE ? `${oneLine.slice(0, MAX_VALUE - 1)}…` : oneLine}`;
    })
    .join(", ");
}

/** Why a job waits, in words, with when that ends if it is known. */
export function waitingText(waiting: JobWaiting, now = Date.now()): string {
  const until = waiting.until;
  if (until === undefined) return waiting.detail;
  if (waiting.reason === "backoff") return `${waiting.detail} (at ${timestamp(until)})`;
  if (waiting.reason === "event") return `${waiting.detail}, ${leftText(until * 1000 - now)} left`;
  if (waiting.reason === "sleep") return `sleeping until ${timestamp(until)}, ${leftText(until * 1000 - now)} left`;
  return waiting.detail;
}

/** A time left, roughly: "40 s", "12 min", "3 h 5 min", "2 d 4 h". */
export function leftText(ms: number): string {
  const s = Math.max(0, Math.round(ms / 1000));
  if (s < 60) return `${s} s`;
  const min = Math.floor(s / 60);
  if (min < 60) return `${min} min`;
  const h = Math.floor(min / 60);
  if (h < 48) return min % 60 > 0 ? `${h} h ${min % 60} min` : `${h} h`;
  return h % 24 > 0 ? `${Math.floor(h / 24)} d ${h % 24} h` : `${Math.floor(h / 24)} d`;
}

function when(seconds: number | undefined): string {
  return seconds === undefined ? "-" : timestamp(seconds);
}

/**
 * Why a flow failed, in words: `job verify failed: exit code 3`, and the compensations that did
 * not end well when its unwinding failed.
 */
export function flowErrorText(
  error: Flow["error"],
  keyOf: (id: number) => string | undefined = () => undefined,
): string {
  if (!error) return "-";
  const failed = error.failed_compensations?.length
    ? `; compensations failed: ${error.failed_compensations.join(", ")}`
    : "";
  // Job 0 is the flow itself (a cancel, its deadline): its reason says so already ("cancelled: …").
  if (error.job === 0) return `${error.reason}${failed}`;
  return `job ${keyOf(error.job) ?? error.name ?? error.job} failed: ${error.reason}${failed}`;
}

/**
 * The first lines of a watched flow's end once it unwound (compensated, compensation_failed):
 * why it failed and which compensations failed, then how many ran or how to run them again.
 */
export function unwoundLines(view: FlowView, took: string): string[] {
  const keyOf = (id: number) => view.jobs.find((j) => j.id === id)?.key;
  const undone = view.jobs.filter((j) => j.compensates !== undefined && j.status === "finished").length;
  return [
    `flow ${view.id} ${flowWord(view)}${took}: ${flowErrorText(view.error, keyOf)}`,
    view.status === "compensated"
      ? `  unwound: ${plural(undone, "compensation")} ran`
      : `  not unwound: flowc flow rerun ${view.context_id} ${view.id} runs the failed compensations again`,
  ];
}

/** The first line of a flow that ended in error: `flow 3 failed in 9 s: job verify failed: exit code 3`, `flow 3 cancelled: not today`. */
export function endLine(view: FlowView, seconds: string): string {
  const { word } = flowWords(view);
  if (!view.error) return `flow ${view.id} ${word}${seconds}`;
  if (view.error.job === 0) {
    // The flow's own error (a cancel, its deadline): a cancel's reason without the word again.
    const reason = word === "cancelled" ? view.error.reason.replace(/^cancelled:?\s*/, "") : view.error.reason;
    return `flow ${view.id} ${word}${seconds}${reason ? `: ${reason}` : ""}`;
  }
  const failed = view.jobs.find((j) => j.id === view.error?.job);
  return `flow ${view.id} ${word}${seconds}: job ${failed?.key ?? view.error.name ?? view.error.job} failed: ${view.error.reason}`;
}

/**
 * How long a flow ran, ` in 420 ms` (the view's milliseconds, shared/model/durations.ts); from a
 * coordinator that keeps whole seconds only, ` in 9 s`, or ` in under a second`.
 */
export function tookText(view: FlowView): string {
  if (view.started_at_ms !== undefined && view.ended_at_ms !== undefined)
    return ` in ${formatMs(view.ended_at_ms - view.started_at_ms)}`;
  if (view.started_at === undefined || view.ended_at === undefined) return "";
  const took = view.ended_at - view.started_at;
  return took === 0 ? " in under a second" : ` in ${took} s`;
}

/** Whether a flow of this status ended: finished, in error, or unwound. */
export function flowEnded(status: FlowView["status"]): boolean {
  return status === "finished" || status === "error" || status === "compensated" || status === "compensation_failed";
}

/** How a job is named in a listing: a compensation marked `↩` (it undoes a job when the flow unwinds). */
export function jobLabel(job: { key: string; compensates?: number | undefined }): string {
  return job.compensates !== undefined ? `↩ ${job.key}` : job.key;
}

/**
 * What a job runs, as a column says it: its script type, `wait` / `sleep`, `⇣ flow 12` (its child
 * flow, once known), or `map:<script type>`.
 */
function typeText(job: { kind: string; script_type?: string | undefined; child_flow_id?: number | undefined }): string {
  if (job.kind === "flow") return job.child_flow_id === undefined ? "⇣ flow" : `⇣ flow ${job.child_flow_id}`;
  if (job.kind === "map") return `map:${job.script_type ?? "?"}`;
  return job.script_type ?? job.kind;
}

/** A job that joined the flow while it ran, said after what it depends on: `item 2 of process`, `added by plan`. */
function originText(
  job: { map_of?: number | undefined; item_index?: number | undefined; added_by?: number | undefined },
  keyOf: (id: number) => string,
): string {
  if (job.map_of !== undefined) return `item ${job.item_index ?? "?"} of ${keyOf(job.map_of)}`;
  return job.added_by !== undefined ? `added by ${keyOf(job.added_by)}` : "";
}

/** Why a job is as it is, without its word (`exit code 3`, not `failed: exit code 3`); undefined when nothing to say. */
export function whyText(job: JobFacts): string | undefined {
  const { word, why } = jobWords(job);
  if (!why) return undefined;
  return why.startsWith(`${word}:`) ? why.slice(word.length + 1).trim() : why;
}

/**
 * How far a flow is, in plain words: `3 of 5 jobs ended (2 finished, 0 failed, 1 not run, 1
 * running, 1 waiting for an event)`. A wait, a sleep or a map under way holds no runner: each is
 * told apart from the jobs that run.
 */
function progressText(view: FlowView): string {
  const count = (word: string) => view.jobs.filter((j) => jobWords(j).word === word).length;
  const under = (kind: string) => view.jobs.filter((j) => j.status === "started" && j.kind === kind).length;
  const [waits, sleeps, maps] = [under("wait"), under("sleep"), under("map")];
  const parts = [
    `${count("finished")} finished`,
    `${count("failed")} failed`,
    ...["cancelled", "not run"].flatMap((word) => (count(word) > 0 ? [`${count(word)} ${word}`] : [])),
    `${Math.max(0, count("running") - maps)} running`,
    ...(waits > 0 ? [`${waits} waiting for an event`] : []),
    ...(sleeps > 0 ? [`${sleeps} sleeping`] : []),
    ...(maps > 0 ? [`${maps} mapping`] : []),
  ];
  const { progress } = view;
  const ended = progress.finished + progress.error + progress.skipped;
  return `${ended} of ${progress.total} jobs ended (${parts.join(", ")})`;
}

/** `flowc flow show`: the flow's fields, then a table of its jobs. */
export function flowLines(view: FlowView): string[] {
  const keyOf = new Map(view.jobs.map((j) => [j.id, j.key]));
  const key = (id: number) => keyOf.get(id) ?? String(id);
  const env = Object.entries(view.env_vars)
    .map(([k, v]) => `${k}=${v}`)
    .join(", ");
  const rows = view.jobs.map((j) => [
    jobLabel(j),
    String(j.id),
    typeText(j),
    `${jobMark(j)} ${jobWords(j).word}`,
    String(j.attempt),
    j.runner_id === undefined ? "-" : String(j.runner_id),
    [j.depends.map(key).join(", "), originText(j, key)].filter((t) => t !== "").join("; ") || "-",
    j.status === "error" || j.status === "skipped"
      ? (whyText(j) ?? "-")
      : j.waiting
        ? j.waiting.reason === "event" || j.waiting.reason === "sleep"
          ? waitingText(j.waiting)
          : `waits: ${waitingText(j.waiting)}`
        : resultText(j.result ?? {}) || "-",
  ]);
  return [
    ...fields([
      ["flow", String(view.id)],
      ...(view.name !== undefined ? ([["name", view.name]] as [string, string][]) : []),
      ...(view.labels ? ([["labels", labelsText(view.labels)]] as [string, string][]) : []),
      ["trigger", triggerText(flowTrigger(view))],
      ["context", String(view.context_id)],
      ["caller", `actor ${view.caller_id}`],
      ...(view.template
        ? ([["template", `${view.template.name} version ${view.template.version}`]] as [string, string][])
        : []),
      ...(view.parent
        ? ([["parent", `flow ${view.parent.flow_id} (job ${view.parent.job_id})`]] as [string, string][])
        : []),
      ["status", flowWord(view)],
      ["priority", String(view.priority)],
      ["run", view.run > 1 ? `${view.run} (re-run ${view.run - 1} time${view.run > 2 ? "s" : ""})` : "1"],
      ["progress", progressText(view)],
      ["started", when(view.started_at)],
      ...(view.compensating_at !== undefined ? [["compensating", when(view.compensating_at)] as [string, string]] : []),
      ["ended", when(view.ended_at)],
      ["error", flowErrorText(view.error, (id) => keyOf.get(id))],
      ["env_vars", env || "-"],
      ["trace", view.trace_id],
    ]),
    "",
    ...table(["JOB", "ID", "TYPE", "STATUS", "ATTEMPT", "RUNNER", "DEPENDS ON", "RESULT / ERROR"], rows),
  ];
}

/**
 * Each node's layer: 1 for jobs without dependencies, else one more than its deepest dependency
 * (the longest path, so a job always sits below everything it waits for).
 */
export function layers(dag: FlowDag): Map<number, number> {
  const parents = new Map<number, number[]>(dag.nodes.map((n) => [n.id, []]));
  for (const { from, to } of dag.edges) parents.get(to)?.push(from);
  const depth = new Map<number, number>();
  const visit = (id: number, trail: Set<number>): number => {
    const known = depth.get(id);
    if (known !== undefined) return known;
    // The coordinator refuses cycles; this only keeps a malformed answer from recursing forever.
    if (trail.has(id)) return 1;
    trail.add(id);
    const value = 1 + Math.max(0, ...(parents.get(id) ?? []).map((p) => visit(p, trail)));
    trail.delete(id);
    depth.set(id, value);
    return value;
  };
  for (const node of dag.nodes) visit(node.id, new Set());
  return depth;
}

/**
 * `flowc flow dag`: the jobs layered by dependency depth, one line each with its status and
 * what it depends on; the layer number starts each layer.
 */
export function dagLines(dag: FlowDag): string[] {
  const depth = layers(dag);
  const keyOf = new Map(dag.nodes.map((n) => [n.id, n.key]));
  const parents = new Map<number, string[]>(dag.nodes.map((n) => [n.id, []]));
  for (const { from, to } of dag.edges) parents.get(to)?.push(keyOf.get(from) ?? String(from));
  const ordered = [...dag.nodes].sort((a, b) => (depth.get(a.id) ?? 0) - (depth.get(b.id) ?? 0));
  const keyWidth = Math.max(...ordered.map((n) => jobLabel(n).length));
  const typeWidth = Math.max(...ordered.map((n) => typeText(n).length));
  const statusWidth = Math.max(...ordered.map((n) => jobWords(n).word.length));
  const key = (id: number) => keyOf.get(id) ?? String(id);
  // A map's instance hangs below its map (an edge of the DAG), said as which item it is.
  const depsText = (node: FlowDag["nodes"][number]) => {
    const deps = (parents.get(node.id) ?? []).filter((k) => node.map_of === undefined || k !== key(node.map_of));
    const origin = originText(node, key);
    return [deps.length > 0 ? `← ${deps.join(", ")}` : "", origin ? `(${origin})` : ""].filter(Boolean).join(" ");
  };
  const depsWidth = Math.max(...ordered.map((n) => depsText(n).length));
  let lastLayer = 0;
  const lines = ordered.map((node) => {
    const layer = depth.get(node.id) ?? 1;
    const label = layer === lastLayer ? "" : String(layer);
    lastLayer = layer;
    const text = [
      `${label.padStart(2)}  ${jobMark(node)} ${jobLabel(node).padEnd(keyWidth)}`,
      typeText(node).padEnd(typeWidth),
      jobWords(node).word.padEnd(statusWidth),
      depsText(node).padEnd(depsWidth),
      node.runner_id !== undefined ? `runner ${node.runner_id}` : "",
      // A wait or a sleep under way: what for, and for how long yet.
      node.waiting?.reason === "event" || node.waiting?.reason === "sleep" ? waitingText(node.waiting) : "",
    ];
    return text.join("  ").trimEnd();
  });
  const layerCount = Math.max(0, ...depth.values());
  return [
    `flow ${dag.flow_id} ${flowWord(dag)}: ${plural(dag.nodes.length, "job")} in ${plural(layerCount, "layer")}, ${plural(dag.edges.length, "dependency", "dependencies")} (← reads "depends on")`,
    ...lines,
  ];
}

/** A listed flow's progress: `3/4` jobs ended (`-/4` when the list does not know). */
export function progressOf(flow: Pick<Flow, "progress" | "jobs">): string {
  const p = flow.progress;
  if (!p) return `-/${flow.jobs.length}`;
  return `${p.finished + p.error + p.skipped}/${p.total}`;
}

/**
 * `flowc flow list`: one row per flow, its name, plain status, what started it, its priority,
 * how far it is, when it was created and ended, and why it did not finish; its labels too with
 * `labels`.
 */
export function flowRows(flows: Flow[], labels = false): string[] {
  const rows = flows.map((f) => [
    String(f.id),
    f.name ?? "-",
    flowWord(f),
    triggerText(flowTrigger(f)),
    String(f.priority ?? 0),
    progressOf(f),
    timestamp(f.created_at),
    when(f.ended_at),
    ...(labels ? [labelsText(f.labels) || "-"] : []),
    f.status === "error" || f.status === "compensated" || f.status === "compensation_failed" ? reasonText(f) : "",
  ]);
  const head = ["ID", "NAME", "STATUS", "TRIGGER", "PRIORITY", "PROGRESS", "CREATED", "ENDED"];
  return table([...head, ...(labels ? ["LABELS"] : []), "WHY"], rows);
}

/** Why a flow did not finish: its job's failure, or a cancel's reason without the word `cancelled` the status says. */
function reasonText(flow: Flow): string {
  const text = flowErrorText(flow.error);
  return flow.error?.job === 0 ? text.replace(/^cancelled: /, "") : text;
}

/**
 * What a `flow.rerun` event says, in words: `runs again, run 2, from b: b, c (env INPUT_N
 * changed)`; `key` names a job by its id, and without it the jobs are counted, not named.
 */
export function rerunText(event: FlowStreamEvent, key?: (id: number) => string): string {
  const from =
    event.from_job_id !== undefined
      ? ` from ${key ? key(event.from_job_id) : `job ${event.from_job_id}`}`
      : " from its failed jobs";
  const jobs = event.jobs ?? [];
  const which = key ? (jobs.length > 0 ? `: ${jobs.map(key).join(", ")}` : "") : ` (${plural(jobs.length, "job")})`;
  const env = event.env_changed?.length ? ` (env ${event.env_changed.join(", ")} changed)` : "";
  return `runs again, run ${event.run ?? 2},${from}${which}${env}`;
}

/** `⇉ process maps its list: 4 instances`: a map under way (its instances are told as they are added). */
export function mapLine(key: string, instances: number | undefined): string {
  return `⇉ ${key} maps its list${instances !== undefined ? `: ${plural(instances, "instance")}` : ""}`;
}

/** A job that joined a flow (`job.added`), said with how: `+ process[2] added: item 2 of process`, `+ report added by plan (after a, b)`. */
export function addedText(added: AddedJob, keyOf: (id: number) => string): string {
  if (added.map_of !== undefined)
    return `+ ${added.key} added: item ${added.item_index ?? "?"} of ${keyOf(added.map_of)}`;
  const by = added.added_by !== undefined ? ` by ${keyOf(added.added_by)}` : "";
  const deps = added.depends.length > 0 ? ` (after ${added.depends.map(keyOf).join(", ")})` : "";
  return `+ ${added.key} added${by}${deps}`;
}

/** A line for a flow-level event that does not end the flow; `key` names a job by its id. */
export function flowLine(event: FlowStreamEvent, key: (id: number) => string): string | undefined {
  const why = event.reason ? `: ${event.reason}` : "";
  switch (event.type) {
    case "flow.started":
      return `  flow ${event.flow_id} started`;
    case "flow.rerun":
      return `  flow ${event.flow_id} ${rerunText(event, key)}`;
    case "flow.paused":
      return `  … flow ${event.flow_id} paused${why}`;
    case "flow.resumed":
      return `  flow ${event.flow_id} resumed`;
    case "flow.compensating":
      return `  ↩ flow ${event.flow_id} unwinds${event.error ? ` (${event.error})` : ""}: the compensations of its finished jobs run, last first`;
    default:
      return undefined;
  }
}
