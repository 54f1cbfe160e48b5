import { ApiError } from "../../shared/client/index.js";
import type { FlowSubmissionInput } from "../../shared/flow/index.js";
import { FlowStatus } from "../../shared/model/index.js";
import { pageOptions, pageQuery, parseChoice, parseId, type Command } from "../command.js";
import { UsageError } from "../errors.js";
import { readFlowFile, refusedFlow } from "../flowfile.js";
import { dagLines, flowLines, flowRows } from "../flow-text.js";
import { pageLines, plural } from "../output.js";
import { actorSession, objectSession } from "../session.js";
import { watchToEnd } from "../watch.js";

const SUBMIT = "flow submit";

const submit: Command = {
  name: SUBMIT,
  summary: "submit a flow from a YAML or JSON file (admins)",
  usage: "flow submit <context> <file> [--start] [--watch] [--idempotency-key <key>]",
  args: ["context", "file"],
  options: {
    start: { type: "boolean", help: "start it at once (otherwise: flowc flow start)" },
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
    "allow_failure), timeouts, id. See examples/README.md and docs/flows.md. Syntax errors",
    "name the file's line and column; fields the coordinator refuses are shown as file:line: field.",
    "Prints the flow id (with --json: the flow as the coordinator answered).",
  ].join("\n"),
  examples: [
    "flowc flow submit 1 examples/diamond.yaml --start --watch",
    "flowc flow submit 1 flow.json --idempotency-key nightly-2026-11-22",
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
    const body = (options.flag("start") ? { ...file.body, start: true } : file.body) as FlowSubmissionInput;
    let view;
    try {
      view = await session.client.submitFlow(contextId, body, key !== undefined ? { idempotencyKey: key } : {});
    } catch (error) {
      throw (error instanceof ApiError && refusedFlow(file, error)) || error;
    }
    const started = view.status !== "dispatched" || view.started_at !== undefined;
    const jobs = `${plural(view.jobs.length, "job")}: ${view.jobs.map((j) => j.key).join(", ")}`;
    const how =
      status === 200 ? `already submitted with idempotency key ${key ?? ""}` : `submitted to context ${contextId}`;
    const next = started ? `${view.status}` : `not started (flowc flow start ${contextId} ${view.id})`;
    if (!options.flag("watch")) {
      out.result(view, [`flow ${view.id} ${how} (${jobs}); ${next}`]);
      return;
    }
    out.line(`flow ${view.id} ${how} (${jobs}); ${next}`);
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

const list: Command = {
  name: "flow list",
  summary: "list a context's flows by id, optionally only those in one status (readers)",
  usage: "flow list <context> [--status <status>] [--offset <n>] [--limit <n>]",
  args: ["context"],
  options: {
    status: { type: "string", value: "<status>", help: `only flows in this status: ${FlowStatus.options.join(", ")}` },
    ...pageOptions("flows"),
  },
  examples: ["flowc flow list 1", "flowc flow list 1 --status error --limit 10"],
  async run(invocation) {
    const name = "flow list";
    const { options, out } = invocation;
    const contextId = parseId(invocation.args[0] ?? "", "<context>", name);
    const filter: { status?: FlowStatus } = {};
    const status = options.string("status");
    if (status !== undefined) filter.status = parseChoice(FlowStatus.options, status, "--status", name);
    const query = { ...filter, ...pageQuery(options, name) };
    const session = await actorSession(invocation, name);
    const page = await session.client.listFlows(contextId, query);
    const noun = status !== undefined ? `${status} flow` : "flow";
    out.result(page, pageLines(page, flowRows(page.items), noun, `context ${contextId}`));
  },
};

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
      invocation.out.result(view, [`flow ${flowId} ${view.status} (${plural(view.jobs.length, "job")})`]);
      return;
    }
    invocation.out.line(`flow ${flowId} ${view.status}`);
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
