import { readFileSync } from "node:fs";
import path from "node:path";
import { isMap, isScalar, isSeq, LineCounter, parseDocument, type Node } from "yaml";
import type { ApiError } from "../shared/client/index.js";
import { FLOW_IDENTITY_LIMITS } from "../shared/model/flow-identity.js";
import { DetailedError } from "./errors.js";

/**
 * Flow files: a FlowSubmission body (`env_vars`, `jobs`, `timeouts`, `id`, `start`) written as
 * YAML or JSON. Syntax errors name the file, line and column; the coordinator's 400 answers,
 * which name fields (`body.jobs.1.depends`), are turned back into lines of the file, since the
 * file is what the user has open.
 */
export interface FlowFile {
  /** The path as the user gave it, for messages. */
  name: string;
  /** The request body as read (env var values coerced to strings, see `stringEnv`). */
  body: Record<string, unknown>;
  /** The name a flow of this file gets when it gives none: the file's name without its extension (nightly.yaml: nightly). */
  defaultName: string | undefined;
  /** Where in the file a field of the body is: `{ line, label }` (label as the file spells it). */
  locate(field: string, message?: string): { line: number; label: string };
}

/** Reads and parses a flow file; every failure is one line naming the file (and line). */
export function readFlowFile(given: string, cwd: string): FlowFile {
  const file = path.resolve(cwd, given);
  let text: string;
  try {
    text = readFileSync(file, "utf8");
  } catch (error) {
    const code = (error as NodeJS.ErrnoException).code;
    throw new Error(
      `cannot read the flow file ${given}: ${code === "ENOENT" ? "no such file" : (code ?? (error as Error).message)}`,
      { cause: error },
    );
  }
  const value = /\.json$/i.test(file) ? parseJson(text, given) : parseYaml(text, given);
  if (!value || typeof value !== "object" || Array.isArray(value)) {
    throw new Error(`${given}: a flow file is a mapping with a "jobs" list (see examples/README.md)`);
  }
  const body = value as Record<string, unknown>;
  stringEnv(body);
  if (Array.isArray(body.jobs))
    for (const job of body.jobs) {
      if (!job || typeof job !== "object") continue;
      stringEnv(job as Record<string, unknown>);
      // A job's compensation has env_vars of its own.
      const compensate = (job as Record<string, unknown>).compensate;
      if (compensate && typeof compensate === "object") stringEnv(compensate as Record<string, unknown>);
    }
  return { name: given, body, defaultName: nameOfFile(file), locate: locator(text) };
}

/**
 * A flow's name from its file's: without the directory and the extension, one line, at most a
 * flow name's length (FLOW_IDENTITY_LIMITS); undefined when nothing is left.
 */
export function nameOfFile(file: string): string | undefined {
  const bare = path
    .basename(file)
    .replace(/\.(ya?ml|json)$/i, "")
    .replace(/\p{Cc}+/gu, " ")
    .slice(0, FLOW_IDENTITY_LIMITS.nameChars)
    .trim();
  return bare === "" ? undefined : bare;
}

function parseJson(text: string, name: string): unknown {
  try {
    return JSON.parse(text);
  } catch (error) {
    const message = (error as Error).message;
    // V8 names the offset ("at position 42"); people need a line and a column.
    const position = Number(/at position (\d+)/.exec(message)?.[1] ?? NaN);
    const reason = message.replace(/ in JSON at position.*$/s, "").replace(/^JSON\.parse: /, "");
    if (Number.isNaN(position)) throw new Error(`${name}: not valid JSON: ${reason}`, { cause: error });
    const before = text.slice(0, position).split("\n");
    throw new Error(`${name}:${before.length}:${(before.at(-1)?.length ?? 0) + 1}: not valid JSON: ${reason}`, {
      cause: error,
    });
  }
}

function parseYaml(text: string, name: string): unknown {
  const lineCounter = new LineCounter();
  const doc = parseDocument(text, { lineCounter, prettyErrors: true, uniqueKeys: true });
  const problems = doc.errors.map((e) => {
    const at = e.linePos?.[0];
    // The library's message repeats the position and quotes the source below it: keep the reason.
    const reason = e.message.split(/ at line \d+, column \d+/)[0] ?? e.message;
    return `${name}${at ? `:${at.line}:${at.col}` : ""}: ${reason}`;
  });
  if (problems.length === 1) throw new Error(problems[0]);
  if (problems.length > 1)
    throw new DetailedError(`${problems[0] as string} (and ${problems.length - 1} more)`, problems.slice(1));
  return doc.toJS();
}

/**
 * Env var values must be strings, but YAML reads `BASE: 7` as a number and `DEBUG: yes` stays a
 * string while `DEBUG: true` becomes a boolean: scalars are turned into the text that was meant.
 */
function stringEnv(holder: Record<string, unknown>): void {
  const env = holder.env_vars;
  if (!env || typeof env !== "object" || Array.isArray(env)) return;
  for (const [name, value] of Object.entries(env)) {
    if (typeof value === "number" || typeof value === "boolean") (env as Record<string, unknown>)[name] = String(value);
  }
}

/** Finds fields in the file's syntax tree; JSON is YAML too, so one walker serves both. */
function locator(text: string): FlowFile["locate"] {
  const lineCounter = new LineCounter();
  const doc = parseDocument(text, { lineCounter });
  const lineOf = (node: Node | null | undefined) => (node?.range ? lineCounter.linePos(node.range[0]).line : 1);
  return (field, message) => {
    const segments = field
      .replace(/^body\.?/, "")
      .split(".")
      .filter(Boolean);
    // "Unrecognized key: "foo"" is reported on the object; the key itself is more useful.
    const unknownKey = message ? /^Unrecognized keys?: "([^"]+)"/.exec(message)?.[1] : undefined;
    if (unknownKey !== undefined) segments.push(unknownKey);
    let node: unknown = doc.contents;
    let line = lineOf(doc.contents as Node | null);
    const label: string[] = [];
    let jobName: string | undefined;
    for (const segment of segments) {
      if (isSeq(node) && /^\d+$/.test(segment)) {
        const item: unknown = node.items[Number(segment)];
        if (!item) break;
        line = lineOf(item as Node);
        label.push(segment);
        if (label.length === 2 && label[0] === "jobs" && isMap(item)) {
          const name: unknown = item.get("name");
          if (typeof name === "string") jobName = name;
        }
        node = item;
      } else if (isMap(node)) {
        // The API names `depends` also when the file used its alias `dependends`.
        const keys = segment === "depends" ? ["depends", "dependends"] : [segment];
        const pair = node.items.find((p) => isScalar(p.key) && keys.includes(String(p.key.value)));
        if (!pair) break;
        line = lineOf(pair.key as Node);
        label.push(String((pair.key as { value: unknown }).value));
        node = pair.value;
      } else {
        break;
      }
    }
    const shown = label.length > 0 ? label.join(".") : segments.join(".") || "the flow";
    return { line, label: jobName !== undefined ? `${shown} (job "${jobName}")` : shown };
  };
}

/**
 * The coordinator's 400 for a flow, as lines of the file: `file:line: field: message` for every
 * field it names. Undefined for any other error (it is shown as it is).
 */
export function refusedFlow(file: FlowFile, error: ApiError): DetailedError | undefined {
  const errors = error.problem.errors;
  if (error.status !== 400 || !Array.isArray(errors) || errors.length === 0) return undefined;
  const lines = errors.map(({ field, message }) => {
    const { line, label } = file.locate(field, message);
    return `${file.name}:${line}: ${label}: ${message}`;
  });
  if (lines.length === 1) return new DetailedError(lines[0] as string);
  return new DetailedError(`${file.name}: the coordinator refused the flow (${lines.length} problems):`, lines);
}
