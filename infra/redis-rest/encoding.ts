import { ErrorReply, StatusReply, type Reply } from "./resp.js";

/** A JSON value as Upstash puts it in `result`. */
export type JsonResult = string | number | null | JsonResult[];

/**
 * Turns a Redis reply into the JSON Upstash returns. With `base64`, every string at any depth is
 * base64-encoded except the status `OK`, which Upstash sends bare (the official client passes a
 * bare `OK` through and decodes everything else). Numbers and null stay as they are. An error
 * nested inside an array (a Lua table, say) becomes its message text, as there is no other place
 * for it in the JSON.
 */
export function toJsonResult(reply: Reply, base64: boolean): JsonResult {
  if (reply === null || typeof reply === "number") return reply;
  if (Array.isArray(reply)) return reply.map((item) => toJsonResult(item, base64));
  if (reply instanceof StatusReply) {
    if (!base64 || reply.value === "OK") return reply.value;
    return Buffer.from(reply.value, "utf8").toString("base64");
  }
  if (reply instanceof ErrorReply) return reply.message;
  return base64 ? reply.toString("base64") : reply.toString("utf8");
}

/** One entry of a `/pipeline` or `/multi-exec` answer. */
export type CommandOutcome = { result: JsonResult } | { error: string };

/** One command's reply as Upstash reports it: `result`, or `error` with a Redis error's message. */
export function toOutcome(reply: Reply, base64: boolean): CommandOutcome {
  return reply instanceof ErrorReply ? { error: reply.message } : { result: toJsonResult(reply, base64) };
}
