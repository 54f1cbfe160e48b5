import { PERMISSION_LISTS, type PermissionList } from "../../shared/auth/index.js";
import { EVENT_LIMITS, type Context } from "../../shared/model/index.js";
import type { PlainStatus } from "../../shared/model/plain-status.js";
import {
  parseChoice,
  parseCount,
  parseId,
  resettableOption,
  type Command,
  type Invocation,
  type ParsedOptions,
} from "../command.js";
import { labelFilter, type WatchFilter } from "../context-filter.js";
import { watchContext } from "../context-watch.js";
import { UsageError } from "../errors.js";
import { fields, ids, timestamp } from "../output.js";
import { actorSession, contextSession } from "../session.js";
import { detailLines } from "./lifecycle.js";

function contextLines(context: Context): string[] {
  return fields([
    ["context", String(context.id)],
    ["admins", ids(context.admins)],
    ["readers", ids(context.readers)],
    ["executors", ids(context.executors)],
    ["max in flight", context.max_inflight !== undefined ? String(context.max_inflight) : "no limit"],
    [
      "flow starts",
      context.flow_starts_per_minute !== undefined ? `${context.flow_starts_per_minute} a minute` : "no limit",
    ],
    [
      "event lookback",
      context.event_lookback !== undefined
        ? `${context.event_lookback} s (events are kept for waits that start later)`
        : "none (an event reaches only the waits already waiting)",
    ],
    ["created", timestamp(context.created_at)],
    ["updated", timestamp(context.updated_at)],
  ]);
}

/** A permission list by name; the singular (`reader`) is accepted too, since it reads naturally. */
function parseList(text: string, command: string): PermissionList {
  const list = PERMISSION_LISTS.find((name) => name === text || name === `${text}s`);
  if (!list)
    throw new UsageError(`<list> must be one of ${PERMISSION_LISTS.join(", ")}, not ${JSON.stringify(text)}`, command);
  return list;
}

function idOptions(options: ParsedOptions, name: string, command: string): number[] {
  return options.list(name).map((text) => parseId(text, `--${name}`, command));
}

const create: Command = {
  name: "context create",
  summary: "create a context; you become its admin",
  usage: "context create [--id <n>] [--admin <actor>]... [--reader <actor>]... [--executor <actor>]...",
  options: {
    id: { type: "string", value: "<n>", help: "ask for this context id (default: the next free one)" },
    admin: { type: "string", multiple: true, value: "<actor>", help: "another admin (repeatable)" },
    reader: { type: "string", multiple: true, value: "<actor>", help: "a reader (repeatable)" },
    executor: { type: "string", multiple: true, value: "<actor>", help: "an executor (repeatable)" },
  },
  examples: ["flowc context create", "flowc context create --reader 4 --executor 5"],
  async run(invocation) {
    const { options, out } = invocation;
    const name = "context create";
    const idText = options.string("id");
    const input = {
      ...(idText !== undefined ? { id: parseId(idText, "--id", name) } : {}),
      admins: idOptions(options, "admin", name),
      readers: idOptions(options, "reader", name),
      executors: idOptions(options, "executor", name),
    };
    const session = await actorSession(invocation, name);
    const context = await session.client.createContext(input);
    out.result(context, [
      `context ${context.id} created (admins ${ids(context.admins)}; readers ${ids(context.readers)}; executors ${ids(context.executors)})`,
    ]);
  },
};

const show: Command = {
  name: "context show",
  summary: "show a context: permission lists, limits, retention and what it stores (readers and up)",
  usage: "context show <context>",
  args: ["context"],
  examples: ["flowc context show 1"],
  async run(invocation) {
    const { contextId, session } = await contextSession(invocation, "context show");
    const context = await session.client.loadContext(contextId);
    invocation.out.result(context, [...contextLines(context), ...detailLines(context)]);
  },
};

function permissionCommand(verb: "grant" | "revoke"): Command {
  const name = `context ${verb}`;
  return {
    name,
    summary:
      verb === "grant"
        ? "add an actor to a permission list (admins)"
        : "remove an actor from a permission list (admins)",
    usage: `context ${verb} <context> <admins|readers|executors> <actor>`,
    args: ["context", "list", "actor"],
    details:
      verb === "grant"
        ? "Readers may read, executors also run jobs, admins may do everything. Granting twice is harmless."
        : "The last admin cannot be removed.",
    examples: [`flowc context ${verb} 1 readers 4`],
    async run(invocation) {
      const [contextText = "", listText = "", actorText = ""] = invocation.args;
      const contextId = parseId(contextText, "<context>", name);
      const list = parseList(listText, name);
      const actorId = parseId(actorText, "<actor>", name);
      const session = await actorSession(invocation, name);
      const context =
        verb === "grant"
          ? await session.client.grant(contextId, list, actorId)
          : await session.client.revoke(contextId, list, actorId);
      const what = verb === "grant" ? `actor ${actorId} added to ${list}` : `actor ${actorId} removed from ${list}`;
      invocation.out.result(context, [`${what} of context ${contextId} (${list}: ${ids(context[list])})`]);
    },
  };
}

const remove: Command = {
  name: "context delete",
  summary: "delete a context and everything in it (admins)",
  usage: "context delete <context> --yes",
  args: ["context"],
  options: {
    yes: { type: "boolean", help: "confirm: the context, its runners, flows and jobs are gone for good" },
  },
  examples: ["flowc context delete 1 --yes"],
  async run(invocation) {
    const id = parseId(invocation.args[0] ?? "", "<context>", "context delete");
    if (!invocation.options.flag("yes")) {
      throw new UsageError(
        `not deleting context ${id} without --yes: it removes everything in the context`,
        "context delete",
      );
    }
    const session = await actorSession(invocation, "context delete");
    const done = await session.client.deleteContext(id);
    invocation.out.result({ context_id: id, deleted: done }, [
      done
        ? `context ${id} deleted`
        : `context ${id} is being deleted: it is gone already, and the rest of it is removed in the background`,
    ]);
  },
};

/** A limit's value: a positive integer, or `none` to lift it. */
function limitOption(options: ParsedOptions, name: string, command: string): number | null | undefined {
  return resettableOption(options, name, "none", (text, what) => parseCount(text, what, command, 1));
}

/** `--event-lookback`: seconds (1 to a day), or `none` to stop keeping events. */
function lookbackOption(options: ParsedOptions, command: string): number | null | undefined {
  return resettableOption(options, "event-lookback", "none", (text, what) => {
    const seconds = parseCount(text, what, command, 1);
    if (seconds > EVENT_LIMITS.lookbackSeconds)
      throw new UsageError(`${what} is at most ${EVENT_LIMITS.lookbackSeconds} (a day), not ${seconds}`, command);
    return seconds;
  });
}

const limits: Command = {
  name: "context limits",
  summary: "set a context's limits: attempts in flight, flow starts a minute, how long events are kept (admins)",
  usage:
    "context limits <context> [--max-inflight <n>|none] [--flow-starts-per-minute <n>|none] [--event-lookback <seconds>|none]",
  args: ["context"],
  options: {
    "max-inflight": {
      type: "string",
      value: "<n>|none",
      help: "the most job attempts the context's runners hold at once, across all its flows",
    },
    "flow-starts-per-minute": {
      type: "string",
      value: "<n>|none",
      help: "the most flow starts a minute; more are refused (429) with when to try again",
    },
    "event-lookback": {
      type: "string",
      value: "<seconds>|none",
      help: `keep each event this long (1 to ${EVENT_LIMITS.lookbackSeconds}) for waits that start after it came`,
    },
  },
  details: [
    "A limit not given stays as it is; `none` lifts it. Without options, shows the limits.",
    "A flow's own cap (max_parallel) and priority are set when it is submitted (flow file).",
    "--event-lookback: by default an event (flowc event send) reaches only the waits already",
    "waiting; with a lookback, a wait for its name and key that starts within that many seconds",
    "after it came takes it (the earliest kept, if several); `none` stops keeping events.",
  ].join("\n"),
  examples: [
    "flowc context limits 1 --max-inflight 20",
    "flowc context limits 1 --flow-starts-per-minute none",
    "flowc context limits 1 --event-lookback 600",
  ],
  async run(invocation) {
    const name = "context limits";
    const contextId = parseId(invocation.args[0] ?? "", "<context>", name);
    const maxInflight = limitOption(invocation.options, "max-inflight", name);
    const perMinute = limitOption(invocation.options, "flow-starts-per-minute", name);
    const lookback = lookbackOption(invocation.options, name);
    const session = await actorSession(invocation, name);
    const context =
      maxInflight === undefined && perMinute === undefined && lookback === undefined
        ? await session.client.loadContext(contextId)
        : await session.client.setLimits(contextId, {
            ...(maxInflight !== undefined ? { max_inflight: maxInflight } : {}),
            ...(perMinute !== undefined ? { flow_starts_per_minute: perMinute } : {}),
            ...(lookback !== undefined ? { event_lookback: lookback } : {}),
          });
    invocation.out.result(context, contextLines(context));
  },
};

/** The statuses `context watch --status` takes: plain words, as `flow list --status` does. */
const WATCH_STATUSES = [
  "created",
  "running",
  "finished",
  "failed",
  "cancelled",
  "compensating",
  "compensated",
  "compensation-failed",
];

/** The filters of `context watch`: --name, --label (repeatable), --status. */
function watchFilter(invocation: Invocation, command: string): WatchFilter {
  const { options } = invocation;
  const name = options.string("name");
  const status = options.string("status");
  const word = status !== undefined ? parseChoice(WATCH_STATUSES, status, "--status", command) : undefined;
  return {
    ...(name !== undefined ? { name } : {}),
    labels: labelFilter(options.list("label")),
    ...(word !== undefined ? { status: word.replace("-", " ") as PlainStatus } : {}),
  };
}

const watch: Command = {
  name: "context watch",
  summary: "follow a context live: a line per event of any of its flows, until Ctrl-C (readers)",
  usage: "context watch <context> [--since <seq>] [--name <text>] [--label <key=value>]... [--status <status>]",
  args: ["context"],
  options: {
    since: {
      type: "string",
      value: "<seq>",
      help: "start after this event of the context's stream (default: from now on)",
    },
    name: { type: "string", value: "<text>", help: "only flows whose name holds this text (any case)" },
    label: {
      type: "string",
      value: "<key=value>",
      multiple: true,
      help: "only flows with this label (key alone: any value); repeat it for flows with all of them",
    },
    status: {
      type: "string",
      value: "<status>",
      help: `only events that leave their flow ${WATCH_STATUSES.join(", ")}`,
    },
  },
  details: [
    "Follows the context's event stream (Server-Sent Events): every flow's own events, as they",
    "happen: created, started, cancelled, re-run, finished, error, with how many of its jobs ended.",
    "Each line starts with the event's number in the context's stream ([12]): --since 12 picks up",
    "after it. A dropped connection is reconnected where it left off (said on stderr). A context",
    "keeps its last 10,000 events; asking for older ones starts with a reset line. With --json,",
    "one ContextStreamEvent per line. Ctrl-C stops watching (exit 0) and says how to resume.",
  ].join("\n"),
  examples: [
    "flowc context watch 1",
    "flowc context watch 1 --since 120 --json",
    "flowc context watch 1 --label env=prod --status failed",
  ],
  async run(invocation) {
    const name = "context watch";
    const contextId = parseId(invocation.args[0] ?? "", "<context>", name);
    const sinceText = invocation.options.string("since");
    const since = sinceText !== undefined ? parseCount(sinceText, "--since", name) : undefined;
    const filter = watchFilter(invocation, name);
    const session = await actorSession(invocation, name);
    return watchContext(session.client, contextId, since, invocation.out, filter);
  },
};

/** The `context` commands. */
export const contextCommands: Command[] = [
  create,
  show,
  permissionCommand("grant"),
  permissionCommand("revoke"),
  limits,
  watch,
  remove,
];
