import { ApiError, type FlowListOptions } from "../../shared/client/index.js";
import type { FlowSubmissionInput } from "../../shared/flow/index.js";
import { FlowStatus, type Page } from "../../shared/model/index.js";
import { pageOptions, pageQuery, parseChoice, parseId, parsePairs, type Command, type Invocation } from "../command.js";
import { UsageError } from "../errors.js";
import { readFlowFile, refusedFlow, type FlowFile } from "../flowfile.js";
import { flowWord } from "../plain.js";
import { dagLines, flowLines, flowRows } from "../flow-text.js";
import { pageLines, plural } from "../output.js";
import { actorSession, objectSession } from "../session.js";
import { watchToEnd } from "../watch.js";

const SUBMIT = "flow submit";

const submit: Command = {
  name: SUBMIT,
  summary: "submit a flow from a YAML or JSON file (admins)",
  usage:
    "flow submit <context> <file> [--start] [--watch] [--name <name>] [--label <key=value>]... [--idempotency-key <key>]",
  args: ["context", "file"],
  options: {
    start: { type: "boolean", help: "start it at once (otherwise: flowc flow start)" },
    name: {
      type: "string",
      value: "<name>",
      help: "the flow's name (default: the file's own name, else the file's name)",
    },
    label: {
      type: "string",
      multiple: true,
      value: "<key=value>",
      help: "a label, over the file's labels of that key (repeatable)",
    },
    watch: { type: "boolean", help: "then watch it to its end, as flowc flow watch does (exit 1 if it errors)" },
    "idempotency-key": {
      type: "string",
      value: "<key>",
      help: "submitting again with the same key returns the first flow instead of a new one",
    },
  },
  details: [
    "The file is the API's FlowSubmission: env_vars, jobs (name, script_type, script, depends,",
    "env_vars, timeout, retries, runner_id; or a wait for an event, a sleep; when, needs,",
    "allow_failure), timeouts, id, name, labels. See examples/README.md and docs/flows.md. Syntax",
    "errors name the file's line and column; fields the coordinator refuses are shown as",
    "file:line: field. A flow without a name in its file is named after the file (nightly.yaml:",
    "nightly). Prints the flow id (with --json: the flow as the coordinator answered).",
  ].join("\n"),
  examples: [
    "flowc flow submit 1 examples/diamond.yaml --start --watch",
    "flowc flow submit 1 flow.json --idempotency-key nightly-2026-11-22",
    "flowc flow submit 1 report.yaml --name 'report for eu' --label region=eu --start",
  ],
  async run(invocation) {
    const { options, out } = invocation;
    const contextId = parseId(invocation.args[0] ?? "", "<context>", SUBMIT);
    const file = readFlowFile(invocation.args[1] ?? "", invocation.cwd);
    const key = options.string("idempotency-key");
    if (key !== undefined && !/^[\x21-\x7e]{1,128}$/.test(key)) {
      throw new UsageError("--idempotency-key must be 1 to 128 printable characters without spaces", SUBMIT);
    }
    let status = 0;
    const session = await actorSession(invocation, SUBMIT, { onResponse: (response) => (status = response.status) });
    // The file as read: the coordinator validates it and names the field at fault.
    const body = {
      ...file.body,
      ...identityOptions(invocation, file),
      ...(options.flag("start") ? { start: true } : {}),
    };
    let view;
    try {
      const options = key !== undefined ? { idempotencyKey: key } : {};
      view = await session.client.submitFlow(contextId, body as FlowSubmissionInput, options);
    } catch (error) {
      throw (error instanceof ApiError && refusedFlow(file, error)) || error;
    }
    const started = view.status !== "dispatched" || view.started_at !== undefined;
    const jobs = `${plural(view.jobs.length, "job")}: ${view.jobs.map((j) => j.key).join(", ")}`;
    const how =
      status === 200 ? `already submitted with idempotency key ${key ?? ""}` : `submitted to context ${contextId}`;
    const next = started ? flowWord(view) : `not started (flowc flow start ${contextId} ${view.id})`;
    const named = view.name !== undefined ? ` as ${JSON.stringify(view.name)}` : "";
    const line = `flow ${view.id} ${how}${named} (${jobs}); ${next}`;
    if (!options.flag("watch")) {
      out.result(view, [line]);
      return;
    }
    out.line(line);
    return watchToEnd(session.client, contextId, view.id, out);
  },
};

const watch: Command = {
  name: "flow watch",
  summary: "follow a flow to its end, live: a line per job as it changes, then the result (readers)",
  usage: "flow watch <context> <flow>",
  args: ["context", "flow"],
  details: [
    "Loads the flow once and prints what its jobs did so far, then follows the flow's event stream",
    "(Server-Sent Events, no polling): a line per job as it starts (runner, attempt), finishes (its",
    "result), fails or is scheduled for a retry; as a wait starts (the event and key it waits for,",
    "the time left before its timeout), a sleep starts (until when), or a job is skipped (why); with",
    "a count of ended jobs (skipped ones included), and a progress bar on a terminal. A dropped",
    "connection is reconnected where it left off, said on stderr; after 30 s without a connection",
    "flowc gives up (exit 1). When the flow ends: the final status and every job's result, the",
    "skipped jobs and why; on error, the job that failed, why (and the last lines it wrote to",
    "stderr), and the jobs that never ran. Exit status: 0 when the flow finished, 1 when it",
    "errored. --json prints only the final flow. Ctrl-C stops watching; the flow goes on.",
  ].join("\n"),
  examples: ["flowc flow watch 1 3", "flowc flow watch 1 3 --json > flow-3.json"],
  async run(invocation) {
    const { contextId, id: flowId, session } = await objectSession(invocation, "<flow>", "flow watch");
    return watchToEnd(session.client, contextId, flowId, invocation.out);
  },
};

const show: Command = {
  name: "flow show",
  summary: "show a flow: status, progress, and every job's state and result (readers)",
  usage: "flow show <context> <flow>",
  args: ["context", "flow"],
  examples: ["flowc flow show 1 3", "flowc flow show 1 3 --json"],
  async run(invocation) {
    const { contextId, id: flowId, session } = await objectSession(invocation, "<flow>", "flow show");
    const view = await session.client.loadFlow(contextId, flowId);
    invocation.out.result(view, flowLines(view));
  },
};

/** The `--name` and `--label` of a submission: over the file's own, the file's name when none gives one. */
function identityOptions(invocation: Invocation, file: FlowFile): { name?: string; labels?: Record<string, string> } {
  const name = invocation.options.string("name") ?? (file.body.name === undefined ? file.defaultName : undefined);
  const given = parsePairs(invocation.options.list("label"), "--label", SUBMIT);
  const own = file.body.labels && typeof file.body.labels === "object" ? file.body.labels : {};
  const labels = Object.keys(given).length > 0 ? { labels: { ...own, ...given } } : {};
  return { ...(name !== undefined ? { name } : {}), ...labels };
}

const LIST = "flow list";

/** `--status` takes the API's names, and the plain words that stand for one of them. */
const STATUS_WORDS: Record<string, FlowStatus> = {
  created: "dispatched",
  running: "started",
  failed: "error",
  "compensation-failed": "compensation_failed",
};

const list: Command = {
  name: LIST,
  summary: "list a context's flows: name, status, trigger, priority, progress; by status, name and labels (readers)",
  usage:
    "flow list <context> [--status <status>] [--name <text>] [--label <key=value>]... [--newest] [--show-labels] [--offset <n>] [--limit <n>]",
  args: ["context"],
  options: {
    status: {
      type: "string",
      value: "<status>",
      help: `only flows in this status: created, running, finished, failed (or cancelled), compensating, compensated, compensation-failed (or the API's ${FlowStatus.options.join(", ")})`,
    },
    name: { type: "string", value: "<text>", help: "only flows whose name holds this text (any case)" },
    label: {
      type: "string",
      multiple: true,
      value: "<key=value>",
      help: "only flows with this label (key alone: any value); repeat it for flows with all of them",
    },
    newest: { type: "boolean", help: "newest first (default: oldest first)" },
    "show-labels": { type: "boolean", help: "a column with each flow's labels" },
    ...pageOptions("flows"),
  },
  details: [
    "Each flow: its id, name, status in plain words, trigger (manual, schedule N, parent flow N,",
    "template NAME vN), priority, progress (jobs ended / jobs), when it was created and ended, and",
    "why it did not finish. With --name or --label a page looks through at most 200 flows; it may",
    "show fewer than --limit, and says where the next page goes on (--offset).",
  ].join("\n"),
  examples: [
    "flowc flow list 1",
    "flowc flow list 1 --status failed --newest --limit 10",
    "flowc flow list 1 --name nightly --label env=prod --show-labels",
  ],
  async run(invocation) {
    const { options, out } = invocation;
    const contextId = parseId(invocation.args[0] ?? "", "<context>", LIST);
    const query: FlowListOptions = {
      ...pageQuery(options, LIST),
      ...(options.flag("newest") ? { order: "newest" } : {}),
    };
    const status = options.string("status");
    if (status !== undefined) {
      const chosen = parseChoice([...Object.keys(STATUS_WORDS), ...FlowStatus.options], status, "--status", LIST);
      query.status = STATUS_WORDS[chosen] ?? (chosen as FlowStatus);
    }
    const name = options.string("name");
    if (name !== undefined) query.name = name;
    // key=value as kubectl's -l has it; the API's own key:value and key alone pass as they are.
    const labels = options.list("label").map((text) => (text.includes("=") ? text.replace("=", ":") : text));
    if (labels.length > 0) query.label = labels;
    const session = await actorSession(invocation, LIST);
    const page = await session.client.listFlows(contextId, query);
    const noun = status !== undefined ? `${status} flow` : "flow";
    const filtered = name !== undefined || labels.length > 0;
    const rows = flowRows(page.items, options.flag("show-labels"));
    out.result(
      page,
      filtered ? filteredLines(page, rows, contextId) : pageLines(page, rows, noun, `context ${contextId}`),
    );
  },
};

/** A filtered page's lines: what matched, and where the look through the flows goes on. */
function filteredLines(page: Page<unknown>, rows: string[], contextId: number): string[] {
  const more = page.next !== undefined ? `; more may match from --offset ${page.next}` : "";
  if (page.items.length === 0) return [`no flow matches in context ${contextId} at this offset${more}`];
  return [...rows, `${plural(page.items.length, "flow")} matched in context ${contextId}${more}`];
}

const start: Command = {
  name: "flow start",
  summary: "start a submitted flow (admins); starting it again changes nothing",
  usage: "flow start <context> <flow> [--watch]",
  args: ["context", "flow"],
  options: {
    watch: { type: "boolean", help: "then watch it to its end, as flowc flow watch does (exit 1 if it errors)" },
  },
  examples: ["flowc flow start 1 3", "flowc flow start 1 3 --watch"],
  async run(invocation) {
    const { contextId, id: flowId, session } = await objectSession(invocation, "<flow>", "flow start");
    const view = await session.client.startFlow(contextId, flowId);
    if (!invocation.options.flag("watch")) {
      invocation.out.result(view, [`flow ${flowId} ${flowWord(view)} (${plural(view.jobs.length, "job")})`]);
      return;
    }
    invocation.out.line(`flow ${flowId} ${flowWord(view)}`);
    return watchToEnd(session.client, contextId, flowId, invocation.out);
  },
};

const dag: Command = {
  name: "flow dag",
  summary: "show a flow's jobs layered by dependency, with their statuses (readers)",
  usage: "flow dag <context> <flow>",
  args: ["context", "flow"],
  details: "Layer 1 holds the jobs without dependencies; every other job sits one layer below its deepest dependency.",
  examples: ["flowc flow dag 1 3", "flowc flow dag 1 3 --json"],
  async run(invocation) {
    const { contextId, id: flowId, session } = await objectSession(invocation, "<flow>", "flow dag");
    const answer = await session.client.flowDag(contextId, flowId);
    invocation.out.result(answer, dagLines(answer));
  },
};

/** The `flow` commands. */
export const flowCommands: Command[] = [submit, watch, show, list, start, dag];
