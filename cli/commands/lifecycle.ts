import type { ContextDetails, RetentionUpdate } from "../../shared/model/index.js";
import { parseCount, resettableOption, type Command } from "../command.js";
import { UsageError } from "../errors.js";
import { fields } from "../output.js";
import { contextSession, objectSession } from "../session.js";

const UNITS: Record<string, number> = { s: 1, m: 60, h: 3600, d: 86_400 };

/** A duration in seconds: `90`, `90s`, `15m`, `12h`, `7d`. */
export function parseDuration(text: string, what: string, command: string): number {
  const m = /^(\d{1,9})([smhd]?)$/.exec(text);
  const seconds = m ? Number(m[1]) * (UNITS[m[2] || "s"] as number) : 0;
  if (!m || seconds < 1)
    throw new UsageError(
      `${what} must be a duration such as 90s, 15m, 12h or 7d, not ${JSON.stringify(text)}`,
      command,
    );
  return seconds;
}

/** A duration for humans: the largest unit that divides it. */
export function formatDuration(seconds: number): string {
  for (const [unit, size] of [...Object.entries(UNITS)].reverse())
    if (seconds % size === 0) return `${seconds / size}${unit}`;
  return `${seconds}s`;
}

/** The retention and storage lines of `context show` and `context retention`. */
export function detailLines(context: ContextDetails): string[] {
  const r = context.retention_in_force;
  const own = (part: (typeof r.overridden)[number]) => (r.overridden.includes(part) ? "" : " (default)");
  const s = context.stored;
  return fields([
    ["keep finished", `${formatDuration(r.finished_seconds)}${own("finished_seconds")}`],
    ["keep error", `${formatDuration(r.error_seconds)}${own("error_seconds")}`],
    ["keep unread inbox", `${formatDuration(r.inbox_seconds)}${own("inbox_seconds")}`],
    ["dead letters max", `${r.dead_letters}${own("dead_letters")}`],
    [
      "flows",
      `${s.flows.dispatched} submitted, ${s.flows.started} running, ${s.flows.finished} finished, ${s.flows.error} error`,
    ],
    ["awaiting removal", `${s.ended.finished} finished, ${s.ended.error} error (flows and lone jobs)`],
    ["jobs", String(s.jobs)],
    ["messages", `${s.messages} between actors, ${s.unread_inbox} unread in inboxes`],
    ["dead letters", String(s.dead_letters)],
    ["runners, schedules", `${s.runners}, ${s.schedules}`],
  ]);
}

const retention: Command = {
  name: "context retention",
  summary: "set how long a context keeps ended flows, unread messages and dead letters (admins)",
  usage:
    "context retention <context> [--finished <dur>|default] [--error <dur>|default] [--inbox <dur>|default] [--dead-letters <n>|default]",
  args: ["context"],
  options: {
    finished: { type: "string", value: "<dur>", help: "keep a flow that finished this long after its end (7d)" },
    error: { type: "string", value: "<dur>", help: "keep a flow that ended in error this long after its end" },
    inbox: { type: "string", value: "<dur>", help: "keep a message unread in an inbox this long" },
    "dead-letters": { type: "string", value: "<n>", help: "keep at most this many dead letters (oldest go first)" },
  },
  details: [
    "Durations: 90s, 15m, 12h, 7d. `default` goes back to the deployment's setting; a part not",
    "given stays. Without options, shows the retention in force and what the context stores.",
    "Removal is the sweep's, a bounded batch per context a minute; a running flow is never",
    "removed. A read inbox message is removed as it is read.",
  ].join("\n"),
  examples: ["flowc context retention 1", "flowc context retention 1 --finished 1d --error 14d --dead-letters 1000"],
  async run(invocation) {
    const name = "context retention";
    const { options } = invocation;
    const window = (option: string) =>
      resettableOption(options, option, "default", (text, what) => parseDuration(text, what, name));
    const parts: [keyof RetentionUpdate, number | null | undefined][] = [
      ["finished_seconds", window("finished")],
      ["error_seconds", window("error")],
      ["inbox_seconds", window("inbox")],
      ["dead_letters", resettableOption(options, "dead-letters", "default", (t, w) => parseCount(t, w, name, 1))],
    ];
    const update: RetentionUpdate = Object.fromEntries(parts.filter(([, value]) => value !== undefined));
    const { contextId, session } = await contextSession(invocation, name);
    const context =
      Object.keys(update).length === 0
        ? await session.client.loadContext(contextId)
        : await session.client.lifecycle.setRetention(contextId, update);
    invocation.out.result(context, detailLines(context));
  },
};

const deleteFlow: Command = {
  name: "flow delete",
  summary: "delete an ended flow now, with its jobs, messages, logs and event stream (admins)",
  usage: "flow delete <context> <flow>",
  args: ["context", "flow"],
  details: "Only a flow that ended can be deleted: cancel a running one first. Its dead letters stay.",
  examples: ["flowc flow delete 1 3"],
  async run(invocation) {
    const { contextId, id: flowId, session } = await objectSession(invocation, "<flow>", "flow delete");
    await session.client.lifecycle.deleteFlow(contextId, flowId);
    invocation.out.result({ context_id: contextId, flow_id: flowId, deleted: true }, [`flow ${flowId} deleted`]);
  },
};

/** `context retention`, `flow delete`. */
export const lifecycleCommands: Command[] = [retention, deleteFlow];
