import { ApiError } from "../shared/client/index.js";

/** Exit codes: 2 for a command line the CLI cannot make sense of, 1 for everything else. */
export const EXIT_FAILURE = 1;
export const EXIT_USAGE = 2;

/**
 * A command line the CLI cannot act on (unknown command or flag, missing or malformed argument).
 * `command` is what `--help` should be run on to fix it.
 */
export class UsageError extends Error {
  override name = "UsageError";
  constructor(
    message: string,
    readonly command = "",
  ) {
    super(message);
  }
}

/** Missing or unreadable configuration: the message names the flag, variable or field to set. */
export class ConfigError extends Error {
  override name = "ConfigError";
}

/**
 * A failure with more to say than one line, e.g. every field the coordinator refused in a flow
 * file: the message is the one line, `details` are printed indented below it.
 */
export class DetailedError extends Error {
  override name = "DetailedError";
  constructor(
    message: string,
    readonly details: string[] = [],
  ) {
    super(message);
  }
}

/** The coordinator could not be reached at all (refused, DNS, timeout), as opposed to answering an error. */
export class NetworkError extends Error {
  override name = "NetworkError";
  constructor(
    readonly url: string,
    cause: unknown,
  ) {
    super(`cannot reach the coordinator at ${url}: ${networkReason(cause)}`, { cause });
  }
}

/**
 * Digs the useful reason out of a failed fetch: undici reports every failure as
 * `TypeError: fetch failed` and hides the system error (ECONNREFUSED, ENOTFOUND) in `cause`.
 */
function networkReason(error: unknown): string {
  if (error instanceof Error && (error.name === "TimeoutError" || error.name === "AbortError"))
    return "no answer in time";
  let current: unknown = error;
  for (let depth = 0; depth < 5 && current instanceof Error; depth++) {
    const code = (current as { code?: unknown }).code;
    if (typeof code === "string" && code.startsWith("E")) return `${code} (${current.message})`;
    if (!(current.cause instanceof Error)) return current.message;
    current = current.cause;
  }
  return String(error);
}

/** Words of a problem title as a type slug, to tell whether the type adds anything to the title. */
function slug(title: string): string {
  return title
    .toLowerCase()
    .replace(/[^a-z0-9]+/g, "-")
    .replace(/^-|-$/g, "");
}

/** One line for an API error: status, title, the problem code when it says more, detail, and the lists a 403 needs. */
export function describeApiError(error: ApiError): string {
  const { problem } = error;
  const code = error.code !== slug(problem.title) && error.code !== "about:blank" ? ` [${error.code}]` : "";
  const detail = problem.detail ? `: ${problem.detail}` : "";
  const needed =
    Array.isArray(problem.needed) && problem.needed.length > 0 ? ` (needed: ${problem.needed.join(", ")})` : "";
  return `${error.status} ${problem.title}${code}${detail}${needed}`;
}

/** A schema failure means the URL answered, but not like a coordinator: say so instead of dumping zod issues. */
function isSchemaError(error: unknown): boolean {
  return error instanceof Error && error.name === "ZodError";
}

/**
 * Turns anything a command threw into the one line the user sees and the exit code. Stack traces
 * are never shown: every expected failure has its own message, and an unexpected one still gets
 * its message alone.
 */
export function describeError(error: unknown): { message: string; exitCode: number; details: string[] } {
  if (error instanceof UsageError) {
    const help = error.command ? `flowc ${error.command} --help` : "flowc --help";
    return { message: `${error.message} (see ${help})`, exitCode: EXIT_USAGE, details: [] };
  }
  if (error instanceof ApiError) return { message: describeApiError(error), exitCode: EXIT_FAILURE, details: [] };
  if (isSchemaError(error)) {
    return {
      message: "the coordinator's answer is not what the API promises: is the URL (--url) a flow coordinator?",
      exitCode: EXIT_FAILURE,
      details: [],
    };
  }
  const message = error instanceof Error ? error.message : String(error);
  const details = error instanceof DetailedError ? error.details : [];
  return { message: message.split("\n")[0] ?? "failed", exitCode: EXIT_FAILURE, details };
}
