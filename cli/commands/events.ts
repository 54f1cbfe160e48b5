import { readFileSync } from "node:fs";
import type { z } from "zod";
import { ApiError } from "../../shared/client/index.js";
import { EVENT_LIMITS, EventInput, type EventSent } from "../../shared/model/index.js";
import { parseId, parsePairs, type Command } from "../command.js";
import { NetworkError, UsageError } from "../errors.js";
import { plural } from "../output.js";
import { actorSession } from "../session.js";

const NAME = "event send";

/** What each field of the event is called on the command line, for a refusal that names it. */
const FIELD_OPTION: Record<string, string> = { id: "--id", name: "<name>", key: "--key", data: "--data" };

/**
 * The event's data: `--data-json`'s object (`-` reads it from stdin), then each `--data k=v`
 * over it. Values are strings, as a result's are.
 */
export function parseEventData(pairs: string[], json: string | undefined, command = NAME): Record<string, string> {
  const data: Record<string, string> = {};
  if (json !== undefined) {
    const text = json === "-" ? readFileSync(0, "utf8") : json;
    let parsed: unknown;
    try {
      parsed = JSON.parse(text);
    } catch (error) {
      throw new UsageError(`--data-json is not JSON: ${(error as Error).message}`, command);
    }
    if (typeof parsed !== "object" || parsed === null || Array.isArray(parsed))
      throw new UsageError('--data-json must be a JSON object of strings, e.g. {"decision":"yes"}', command);
    for (const [key, value] of Object.entries(parsed)) {
      if (typeof value !== "string")
        throw new UsageError(
          `--data-json's values must be strings (a result's are): ${JSON.stringify(key)} is ${value === null ? "null" : Array.isArray(value) ? "an array" : `a ${typeof value}`}`,
          command,
        );
      data[key] = value;
    }
  }
  return { ...data, ...parsePairs(pairs, "--data", command) };
}

/** The event as the coordinator takes it, checked here first: a refusal names the option at fault. */
function eventInput(fields: z.input<typeof EventInput>): EventInput {
  const checked = EventInput.safeParse(fields);
  if (checked.success) return checked.data;
  const issue = checked.error.issues[0];
  const field = String(issue?.path[0] ?? "");
  const where = FIELD_OPTION[field] ?? (field || "the event");
  const inner = issue && issue.path.length > 1 ? ` (${issue.path.slice(1).join(".")})` : "";
  throw new UsageError(`${where}${inner}: ${issue?.message ?? "refused"}`, NAME);
}

/** The answer in words: how many waits the event matched and resumed, and what to do next. */
export function eventSentLines(sent: EventSent): string[] {
  const duplicate = sent.duplicate ? " (sent before: duplicate)" : "";
  const lines = [`event ${sent.id}: matched ${plural(sent.matched, "wait")}, resumed ${sent.resumed}${duplicate}`];
  if (sent.more)
    lines.push(
      `more waits were waiting than one event resumes (${EVENT_LIMITS.waitsPerEvent}): send again, with another --id`,
    );
  return lines;
}

const send: Command = {
  name: NAME,
  summary: "send an event to a context's waits: each wait for its name and key finishes with its data (executors)",
  usage: `${NAME} <context> <name> [--key <k>] [--id <id>] [--data <k=v>]... [--data-json <json>|-]`,
  args: ["context", "name"],
  options: {
    key: { type: "string", value: "<k>", help: "the key a wait's resolved key must equal (default: empty)" },
    id: {
      type: "string",
      value: "<id>",
      help: "the same id again within a day is the same event: sent once (default: a new id)",
    },
    data: {
      type: "string",
      multiple: true,
      value: "<k=v>",
      help: "a value of the data every matched wait finishes with, its result",
    },
    "data-json": {
      type: "string",
      value: "<json>",
      help: "the data as a JSON object of strings (- reads it from stdin); --data values go over it",
    },
  },
  details: [
    "Every wait of the context waiting for <name> with that key is matched, and each one still",
    "waiting finishes now, with the data (and event_id) as its result: `resumed` counts those. A",
    "wait that ended already (by this event sent before, another event, its timeout or a cancel) is",
    "matched, not resumed. Prints the event's id: without --id flowc makes one up, so an answer lost",
    "(a network error, a 5xx) is made good by sending again with --id <that id>; the same id again",
    "answers 'sent before: duplicate' and resumes no wait twice. The same id with another name, key",
    "or data is refused (409). A context that keeps events (flowc context limits --event-lookback)",
    "also hands the event to waits that start later, within that window. Signed as your actor: an",
    "executor or admin of the context. --json prints the answer: id, duplicate, matched, resumed,",
    "and more (true when more waits were waiting than one event resumes: send again, another id).",
    "",
    "examples/approval.yaml waits for order.approved with the order's number as its key: the first",
    "example approves order 1042 (its `ship` job runs); --data decision=no refuses it.",
  ].join("\n"),
  examples: [
    "flowc event send 1 order.approved --key 1042 --data decision=yes --data by=alice",
    'flowc event send 1 order.paid --key 42 --id pay-42-1 --data-json \'{"amount":"12.50"}\'',
    "flowc event send 1 deploy.done --json",
  ],
  async run(invocation) {
    const { options, out } = invocation;
    const contextId = parseId(invocation.args[0] ?? "", "<context>", NAME);
    const data = parseEventData(options.list("data"), options.string("data-json"));
    const id = options.string("id") ?? crypto.randomUUID();
    const event = eventInput({
      id,
      name: invocation.args[1] ?? "",
      key: options.string("key") ?? "",
      data,
    });
    const session = await actorSession(invocation, NAME);
    let sent: EventSent;
    try {
      sent = await session.client.sendEvent(contextId, event);
    } catch (error) {
      // The event may have been taken: only the same id tells, and is safe to send again.
      const lost = error instanceof NetworkError || (error instanceof ApiError && error.status >= 500);
      if (lost) out.note(`the answer did not come: send it again with --id ${id} (the same event, taken once)`);
      throw error;
    }
    out.result(sent, eventSentLines(sent));
  },
};

/** Events for the waits of a context's flows. */
export const eventCommands: Command[] = [send];
