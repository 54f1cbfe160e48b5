import { ApiError, type CoordinatorClient, type ScheduleCreationInput } from "../../shared/client/index.js";
import {
  ScheduleOverlap,
  type ScheduleRun,
  type ScheduleSummary,
  type ScheduleView,
  type TemplateRef,
} from "../../shared/model/index.js";
import { scheduleWords } from "../../shared/model/cron-words.js";
import { pageOptions, pageQuery, parseChoice, parseCount, type Command, type Invocation } from "../command.js";
import { DetailedError, UsageError } from "../errors.js";
import { readFlowFile, type FlowFile } from "../flowfile.js";
import { fields, pageLines, table, timestamp } from "../output.js";
import { contextSession, objectSession } from "../session.js";
import { TEMPLATE_INPUT_OPTIONS, versionAndInputs, versionOption } from "../template-inputs.js";

/** Recurring flows: `flowc schedule create|list|show|pause|resume|trigger|delete` (docs/schedules.md). */

const CREATE = "schedule create";
const UNITS: Record<string, number> = { s: 1, m: 60, h: 3600, d: 86_400 };

/** `30s`, `5m`, `2h`, `1d` or plain seconds, as a number of seconds. */
export function parseEvery(text: string, command: string): number {
  const m = /^(\d{1,9})([smhd]?)$/.exec(text);
  const seconds = m ? Number(m[1]) * (UNITS[m[2] || "s"] as number) : NaN;
  if (!(seconds >= 1))
    throw new UsageError(`--every must be a duration such as 30s, 5m, 2h or 1d, not ${JSON.stringify(text)}`, command);
  return seconds;
}

/** The option a field of the creation request came from, for the coordinator's 400s. */
const OPTION_OF: Record<string, string> = {
  "body.cron": "--cron",
  "body.timezone": "--tz",
  "body.interval_seconds": "--every",
  "body.overlap": "--overlap",
  "body.catchup.policy": "--catchup",
  "body.catchup.max": "--catchup-max",
  "body.note": "--note",
};

/** A refused creation as lines: the template's fields as lines of the flow file, the rest by option. */
function refusedSchedule(file: FlowFile, error: ApiError): DetailedError | undefined {
  const errors = error.problem.errors;
  if (error.status !== 400 || !Array.isArray(errors) || errors.length === 0) return undefined;
  const lines = errors.map(({ field, message }) => {
    if (field.startsWith("body.template")) {
      const { line, label } = file.locate(field.replace(/^body\.template/, "body"), message);
      return `${file.name}:${line}: ${label}: ${message}`;
    }
    return `${OPTION_OF[field] ?? field}: ${message}`;
  });
  if (lines.length === 1) return new DetailedError(lines[0] as string);
  return new DetailedError(`the coordinator refused the schedule (${lines.length} problems):`, lines);
}

/** A stored template a schedule starts, in words: `report (latest at each fire) region="us"`. */
function templateText(ref: TemplateRef): string {
  const inputs = Object.entries(ref.inputs).map(([k, v]) => `${k}=${JSON.stringify(v)}`);
  return [ref.name, ref.version !== undefined ? `version ${ref.version}` : "(latest at each fire)", ...inputs].join(
    " ",
  );
}

/** When a schedule fires, in words (as the console says it), with its cron expression as written. */
function when(s: ScheduleSummary): string {
  const words = scheduleWords(s);
  return s.cron !== undefined ? `${words} (cron "${s.cron}" ${s.timezone ?? "UTC"})` : words;
}

const at = (seconds: number | undefined) => (seconds === undefined ? "-" : timestamp(seconds));

/** One run as a row: fire time, trigger, outcome, flow, reason. */
function runRow(r: ScheduleRun): string[] {
  return [
    timestamp(r.fire_at),
    r.trigger,
    r.outcome,
    r.flow_id !== undefined ? String(r.flow_id) : "-",
    r.reason ?? "",
  ];
}

/** A schedule as `show` prints it. */
function scheduleLines(view: ScheduleView): string[] {
  const lines = fields([
    ["schedule", `${view.id} in context ${view.context_id}${view.note ? ` (${view.note})` : ""}`],
    ["status", view.paused_reason ? `${view.status}: ${view.paused_reason}` : view.status],
    ["when", when(view)],
    ["overlap", view.overlap],
    ["catch-up", view.catchup.policy === "run" ? `run, at most ${view.catchup.max}` : "skip"],
    ["next fire", at(view.next_fire_at)],
    ["last fire", at(view.last_fire_at)],
    ["running", view.running_flow_ids.length > 0 ? view.running_flow_ids.join(", ") : "-"],
    ...(view.buffered_fire_at !== undefined ? ([["buffered", at(view.buffered_fire_at)]] as [string, string][]) : []),
    view.from_template
      ? ["template", templateText(view.from_template)]
      : ["jobs", String((view.template?.jobs as unknown[] | undefined)?.length ?? 0)],
  ]);
  if (view.recent_runs.length === 0) return [...lines, "no runs yet"];
  return [...lines, "", ...table(["fire", "trigger", "outcome", "flow", "reason"], view.recent_runs.map(runRow))];
}

const create: Command = {
  name: CREATE,
  summary: "start a flow file on a cron expression or a fixed interval (admins)",
  usage: `${CREATE} <context> (<file> | --template <name> [--version <n>] [--input <name=value> ...]) (--cron '<expr>' [--tz <zone>] | --every <duration>) [--overlap <policy>] [--catchup skip|run] [--catchup-max <n>] [--paused] [--note <text>]`,
  args: ["context", "file?"],
  options: {
    template: { type: "string", value: "<name>", help: "instead of a file: a stored template (flowc template put)" },
    ...TEMPLATE_INPUT_OPTIONS,
    cron: {
      type: "string",
      value: "<expr>",
      help: "5 fields (minute hour day month weekday), or 6 with seconds first",
    },
    tz: { type: "string", value: "<zone>", help: "IANA time zone the cron expression is read in (default UTC)" },
    every: { type: "string", value: "<duration>", help: "instead of --cron: every 30s, 5m, 2h, 1d (from now on)" },
    overlap: {
      type: "string",
      value: "<policy>",
      help: `a fire while its last flow still runs: ${ScheduleOverlap.options.join(", ")} (default skip)`,
    },
    catchup: { type: "string", value: "skip|run", help: "fires missed while the coordinator was down (default skip)" },
    "catchup-max": { type: "string", value: "<n>", help: "with --catchup run: run at most this many (default 10)" },
    paused: { type: "boolean", help: "create it paused (flowc schedule resume starts it)" },
    note: { type: "string", value: "<text>", help: "a note shown with the schedule" },
  },
  details: [
    "The file is a flow file (as for flowc flow submit; its id and start are left out): every fire",
    "submits it as a new flow, started at once, as you, with an Idempotency-Key of the schedule and",
    "the fire time, so a fire repeated by the coordinator starts one flow. Fire times come from the",
    "expression or the interval alone: they do not drift. Prints the schedule id and next fire.",
    "With --template instead of a file, each fire starts that stored template: its --version, else",
    "the latest at the fire, with the --input values (typed by the latest version now).",
  ].join("\n"),
  examples: [
    "flowc schedule create 1 examples/diamond.yaml --cron '0 9 * * MON-FRI' --tz Europe/Berlin",
    "flowc schedule create 1 flow.yaml --every 30s --overlap buffer_one",
    "flowc schedule create 1 flow.yaml --cron '*/10 * * * * *' --catchup run --catchup-max 3",
    "flowc schedule create 1 --template report --input region=us --cron '0 2 * * *'",
  ],
  async run(invocation) {
    const { options, out } = invocation;
    const cron = options.string("cron");
    const every = options.string("every");
    if ((cron === undefined) === (every === undefined)) throw new UsageError("give either --cron or --every", CREATE);
    const tz = options.string("tz");
    if (tz !== undefined && cron === undefined) throw new UsageError("--tz goes with --cron", CREATE);
    const input: Omit<ScheduleCreationInput, "template"> = {};
    if (cron !== undefined) input.cron = cron;
    if (tz !== undefined) input.timezone = tz;
    if (every !== undefined) input.interval_seconds = parseEvery(every, CREATE);
    const overlap = options.string("overlap");
    if (overlap !== undefined) input.overlap = parseChoice(ScheduleOverlap.options, overlap, "--overlap", CREATE);
    const catchup = options.string("catchup");
    const max = options.string("catchup-max");
    if (catchup !== undefined || max !== undefined) {
      input.catchup = {};
      if (catchup !== undefined)
        input.catchup.policy = parseChoice(["skip", "run"] as const, catchup, "--catchup", CREATE);
      if (max !== undefined) input.catchup.max = parseCount(max, "--catchup-max", CREATE, 1);
    }
    if (options.flag("paused")) input.paused = true;
    const note = options.string("note");
    if (note !== undefined) input.note = note;
    const { contextId, session } = await contextSession(invocation, CREATE);
    const view = await createFrom(invocation, session.client, contextId, input);
    out.result(view, [
      `schedule ${view.id} created in context ${contextId} (${when(view)}); ${view.paused ? "paused" : `next fire ${at(view.next_fire_at)}`}`,
    ]);
  },
};

/** Creates the schedule of a flow file, or of a stored template (`--template`). */
async function createFrom(
  invocation: Invocation,
  client: CoordinatorClient,
  contextId: number,
  input: Omit<ScheduleCreationInput, "template">,
): Promise<ScheduleView> {
  const { options } = invocation;
  const name = options.string("template");
  const given = invocation.args[1];
  if ((name === undefined) === (given === undefined))
    throw new UsageError("give either a <file> or --template", CREATE);
  if (name === undefined && (options.string("version") !== undefined || options.list("input").length > 0))
    throw new UsageError("--version and --input go with --template", CREATE);
  if (name !== undefined) {
    const { inputs } = await versionAndInputs(client, contextId, name, options, CREATE);
    const version = versionOption(options, CREATE);
    return client.schedules.create(contextId, {
      ...input,
      from_template: { name, ...(version !== undefined ? { version } : {}), inputs },
    });
  }
  const file = readFlowFile(given ?? "", invocation.cwd);
  const { id: _id, start: _start, ...template } = file.body;
  try {
    return await client.schedules.create(contextId, {
      ...input,
      template: template as NonNullable<ScheduleCreationInput["template"]>,
    });
  } catch (error) {
    throw (error instanceof ApiError && refusedSchedule(file, error)) || error;
  }
}

const list: Command = {
  name: "schedule list",
  summary: "list a context's schedules with their next and last fire (readers)",
  usage: "schedule list <context> [--offset <n>] [--limit <n>]",
  args: ["context"],
  options: pageOptions("schedules"),
  examples: ["flowc schedule list 1", "flowc schedule list 1 --json"],
  async run(invocation) {
    const name = "schedule list";
    const { contextId, session } = await contextSession(invocation, name);
    const page = await session.client.schedules.list(contextId, pageQuery(invocation.options, name));
    const rows = page.items.map((s) => [
      String(s.id),
      s.status,
      when(s),
      s.overlap,
      at(s.next_fire_at),
      at(s.last_fire_at),
    ]);
    const lines = rows.length > 0 ? table(["id", "status", "when", "overlap", "next fire", "last fire"], rows) : [];
    invocation.out.result(page, pageLines(page, lines, "schedule", `context ${contextId}`));
  },
};

const show: Command = {
  name: "schedule show",
  summary: "show a schedule: when it fires, its policies, and its last 20 runs with their flows (readers)",
  usage: "schedule show <context> <schedule>",
  args: ["context", "schedule"],
  examples: ["flowc schedule show 1 2", "flowc schedule show 1 2 --json"],
  async run(invocation) {
    const { contextId, id, session } = await objectSession(invocation, "<schedule>", "schedule show");
    const view = await session.client.schedules.get(contextId, id);
    invocation.out.result(view, scheduleLines(view));
  },
};

/** `schedule pause` and `schedule resume`. */
function pausing(paused: boolean): Command {
  const verb = paused ? "pause" : "resume";
  return {
    name: `schedule ${verb}`,
    summary: paused
      ? "pause a schedule: nothing fires until resumed (admins)"
      : "resume a paused schedule; fires that fell in the pause are not caught up (admins)",
    usage: `schedule ${verb} <context> <schedule>`,
    args: ["context", "schedule"],
    examples: [`flowc schedule ${verb} 1 2`],
    async run(invocation) {
      const { contextId, id, session } = await objectSession(invocation, "<schedule>", `schedule ${verb}`);
      const view = paused
        ? await session.client.schedules.pause(contextId, id)
        : await session.client.schedules.resume(contextId, id);
      const next = view.status === "active" ? `; next fire ${at(view.next_fire_at)}` : "";
      invocation.out.result(view, [`schedule ${id} ${view.status}${next}`]);
    },
  };
}

const trigger: Command = {
  name: "schedule trigger",
  summary: "fire a schedule now, through its overlap policy (admins)",
  usage: "schedule trigger <context> <schedule>",
  args: ["context", "schedule"],
  details: "Prints what became of the fire: the flow it started, or why it was skipped, buffered or failed.",
  examples: ["flowc schedule trigger 1 2", "flowc schedule trigger 1 2 --json"],
  async run(invocation) {
    const { contextId, id, session } = await objectSession(invocation, "<schedule>", "schedule trigger");
    const run = await session.client.schedules.trigger(contextId, id);
    const flow = run.flow_id !== undefined ? ` flow ${run.flow_id}` : "";
    invocation.out.result(run, [`schedule ${id}: ${run.outcome}${flow}${run.reason ? ` (${run.reason})` : ""}`]);
    return run.outcome === "failed" ? 1 : undefined;
  },
};

const remove: Command = {
  name: "schedule delete",
  summary: "delete a schedule; flows it started are left as they are (admins)",
  usage: "schedule delete <context> <schedule>",
  args: ["context", "schedule"],
  examples: ["flowc schedule delete 1 2"],
  async run(invocation) {
    const { contextId, id, session } = await objectSession(invocation, "<schedule>", "schedule delete");
    await session.client.schedules.delete(contextId, id);
    invocation.out.result({ deleted: true, id }, [`schedule ${id} deleted`]);
  },
};

export const scheduleCommands: Command[] = [create, list, show, pausing(true), pausing(false), trigger, remove];
