import { readFileSync } from "node:fs";
import { readInbox, sendMessage, type MessageInput, type MessageText } from "../api.js";
import { parseChoice, parseCount, parseId, type Command } from "../command.js";
import { UsageError } from "../errors.js";
import type { FlowStatus } from "../../shared/model/index.js";
import { resultText } from "../flow-text.js";
import { flowWord } from "../plain.js";
import { plural, timestamp } from "../output.js";
import { actorSession } from "../session.js";

/** A message as the inbox prints it: a header line, then its subject, text and flow result indented. */
function messageLines(message: MessageText): string[] {
  const lines = [
    `message ${message.id} from actor ${message.caller_id}  ${message.message_type}/${message.message_format_type}  ${timestamp(message.created_at)}  ${message.status}`,
  ];
  if (message.subject !== undefined) lines.push(`  subject: ${message.subject}`);
  for (const line of message.message.split("\n")) lines.push(`  | ${line}`);
  const flow = message.flow_result;
  if (flow) {
    const what = flow.job_id !== undefined ? `job ${flow.job_id}` : `flow ${flow.flow_id}`;
    const failed = flow.error && flow.error.job !== 0;
    const why = flow.error
      ? (failed ? `: job ${flow.error.name ?? flow.error.job} failed: ` : ": ") + flow.error.reason
      : "";
    const word = flowWord({ status: flow.status as FlowStatus, ...(flow.error ? { error: flow.error } : {}) });
    lines.push(`  ${what} ${word}${why.replace(/^: cancelled: /, ": ")}`);
    const keys = Object.keys(flow.result);
    const width = Math.max(0, ...keys.map((k) => k.length));
    for (const key of keys) lines.push(`    ${key.padEnd(width)}  ${resultText(flow.result[key] ?? {}) || "-"}`);
  }
  return lines;
}

const inbox: Command = {
  name: "inbox",
  summary: "read your inbox in a context: results of your flows, chat and mail",
  usage: "inbox <context> [--pop] [--max <n>]",
  args: ["context"],
  options: {
    pop: { type: "boolean", help: "take the shown messages off the inbox (default: leave them there)" },
    max: { type: "string", value: "<n>", help: "show at most this many, oldest first, up to 100 (default 20)" },
  },
  details:
    "Every flow you submit ends with a result message here: its status, each job's result, and on error the job that failed.",
  examples: ["flowc inbox 1", "flowc inbox 1 --pop --max 5"],
  async run(invocation) {
    const { options, out } = invocation;
    const contextId = parseId(invocation.args[0] ?? "", "<context>", "inbox");
    const maxText = options.string("max");
    const max = maxText === undefined ? 20 : parseCount(maxText, "--max", "inbox", 1);
    if (max > 100) throw new UsageError(`--max is at most 100, not ${max}`, "inbox");
    const pop = options.flag("pop");
    const session = await actorSession(invocation, "inbox");
    const messages = await readInbox(session.client, contextId, max, pop);
    if (messages.length === 0) {
      out.result({ messages }, [`no messages for actor ${session.actorId} in context ${contextId}`]);
      return;
    }
    const count = plural(messages.length, "message");
    const footer = pop ? `${count} taken off the inbox` : `${count}, left in the inbox (--pop takes them off)`;
    out.result({ messages }, [...messages.flatMap((m) => [...messageLines(m), ""]), footer]);
  },
};

const TYPES = ["chat", "mail"] as const;
const FORMATS = ["text", "md", "html"] as const;

const send: Command = {
  name: "message send",
  summary: "send a chat line or a mail to another member of a context",
  usage: "message send <context> --to <actor> [--type chat|mail] [--format text|md|html] [--subject <s>] <text>",
  args: ["context", "text"],
  options: {
    to: { type: "string", value: "<actor>", help: "the recipient's actor id" },
    type: { type: "string", value: "<type>", help: "chat (default) or mail" },
    format: {
      type: "string",
      value: "<format>",
      help: "how the text is meant to be rendered: text (default), md or html",
    },
    subject: { type: "string", value: "<s>", help: "a subject line (at most 256 characters)" },
  },
  details: "Give - as <text> to read the text from stdin. The message lands in the recipient's inbox (flowc inbox).",
  examples: [
    'flowc message send 1 --to 2 "the nightly flow is green again"',
    "flowc message send 1 --to 2 --type mail --format md --subject report - < report.md",
  ],
  async run(invocation) {
    const name = "message send";
    const { options, out } = invocation;
    const contextId = parseId(invocation.args[0] ?? "", "<context>", name);
    const toText = options.string("to");
    if (toText === undefined) throw new UsageError("missing option --to <actor>", name);
    const to = parseId(toText, "--to", name);
    const given = invocation.args[1] ?? "";
    const text = given === "-" ? readFileSync(0, "utf8") : given;
    if (text === "") throw new UsageError("the message text is empty", name);
    const input: MessageInput = {
      to,
      message_type: parseChoice(TYPES, options.string("type") ?? "chat", "--type", name),
      message_format_type: parseChoice(FORMATS, options.string("format") ?? "text", "--format", name),
      message: text,
    };
    const subject = options.string("subject");
    if (subject !== undefined) input.subject = subject;
    const session = await actorSession(invocation, name);
    const message = await sendMessage(session.client, contextId, input);
    out.result(message, [
      `message ${message.id} sent to actor ${to} in context ${contextId} (${input.message_type}, ${input.message_format_type})`,
    ]);
  },
};

/** The inbox and messages between actors. */
export const messageCommands: Command[] = [inbox, send];
