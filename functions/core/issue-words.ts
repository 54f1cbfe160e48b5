import type { z } from "zod";
import { FlowSubmissionFields } from "../../shared/flow/index.js";

/**
 * What a refused field is told, in words a person acts on: an unknown field with the known one it
 * most likely meant ("did you mean `script`?"), a missing field as missing (not "expected
 * string, received undefined"), and the unit of a number whose unit its name does not say
 * (`timeout` is in seconds). The message keeps zod's own start for an unknown key
 * (`Unrecognized key: "…"`), which flowc reads to point at the key's line.
 */
export function issueMessage(issue: z.core.$ZodIssue): string {
  if (issue.code === "unrecognized_keys") return unknownKeys(issue.keys);
  const field = issue.path.at(-1);
  if (issue.code === "invalid_type" && / received undefined$/.test(issue.message))
    return `missing required field (${issue.message.replace(/^Invalid input: /, "").replace(/, received undefined$/, "")})`;
  const unit = typeof field === "string" ? unitOf(field) : undefined;
  if (unit && (issue.code === "too_big" || issue.code === "too_small" || issue.code === "invalid_type"))
    return `${issue.message} (${String(field)} is in ${unit})`;
  return issue.message;
}

/** Fields whose unit their name does not carry. */
const SECONDS = new Set(["timeout", "timeout_ack", "timeout_result", "flow", "sleep", "event_lookback"]);

function unitOf(field: string): string | undefined {
  if (field.endsWith("_ms")) return "milliseconds";
  if (field.endsWith("_seconds") || SECONDS.has(field)) return "seconds";
  return undefined;
}

function unknownKeys(keys: string[]): string {
  const named = keys.map((key) => {
    const near = closest(key, vocabulary());
    return `"${key}"${near ? ` (did you mean "${near}"?)` : ""}`;
  });
  return `Unrecognized key${keys.length === 1 ? "" : "s"}: ${named.join(", ")}`;
}

/** The field names of a flow file, at every depth (read from its schema once, when first needed). */
let names: string[] | undefined;
function vocabulary(): string[] {
  names ??= [...fieldNames(FlowSubmissionFields, new Set(), 0)];
  return names;
}

/** The object keys a zod schema takes, through pipes, wrappers, arrays, unions and records. */
function fieldNames(schema: unknown, into: Set<string>, depth: number): Set<string> {
  const def = (schema as { _zod?: { def?: Record<string, unknown> } })?._zod?.def;
  if (!def || depth > 12) return into;
  if (def.type === "object") {
    for (const [key, inner] of Object.entries(def.shape as Record<string, unknown>)) {
      into.add(key);
      fieldNames(inner, into, depth + 1);
    }
  }
  for (const part of ["in", "out", "innerType", "element", "valueType"]) fieldNames(def[part], into, depth + 1);
  if (Array.isArray(def.options)) for (const option of def.options) fieldNames(option, into, depth + 1);
  return into;
}

/** The known name nearest to `key` when near enough to be a typo (edit distance 1, or 2 for longer names). */
function closest(key: string, known: string[]): string | undefined {
  const bound = key.length > 5 ? 2 : 1;
  let best: string | undefined;
  let bestDistance = bound + 1;
  for (const name of known) {
    const distance = editDistance(key.toLowerCase(), name);
    if (distance < bestDistance) [best, bestDistance] = [name, distance];
  }
  return best;
}

/** Levenshtein distance, with a swap of two neighbours counted as one edit. */
function editDistance(a: string, b: string): number {
  if (Math.abs(a.length - b.length) > 2) return 3;
  const d: number[][] = Array.from({ length: a.length + 1 }, (_, i) => [i, ...Array<number>(b.length).fill(0)]);
  for (let j = 1; j <= b.length; j++) (d[0] as number[])[j] = j;
  for (let i = 1; i <= a.length; i++) {
    for (let j = 1; j <= b.length; j++) {
      const row = d[i] as number[];
      const prev = d[i - 1] as number[];
      const cost = a[i - 1] === b[j - 1] ? 0 : 1;
      row[j] = Math.min((prev[j] as number) + 1, (row[j - 1] as number) + 1, (prev[j - 1] as number) + cost);
      if (i > 1 && j > 1 && a[i - 1] === b[j - 2] && a[i - 2] === b[j - 1])
        row[j] = Math.min(row[j] as number, ((d[i - 2] as number[])[j - 2] as number) + 1);
    }
  }
  return (d[a.length] as number[])[b.length] as number;
}
