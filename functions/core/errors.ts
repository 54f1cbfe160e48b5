import { ZodError } from "zod";
import { issueMessage } from "./issue-words.js";
import {
  ConflictError,
  CorruptRecordError,
  CrossSlotError,
  NotFoundError,
  StorageUnavailableError,
} from "../../shared/store/index.js";
import { Problem } from "./problem.js";
import { crossSlotProblem } from "./cluster.js";

/**
 * Maps whatever was thrown to a problem: the store's named errors to their kinds, a schema
 * failure to 400 naming the field, and anything unexpected to a 500 that says no more than it
 * must (the details go to the log).
 */
export function toProblem(error: unknown): Problem {
  if (error instanceof Problem) return error;
  if (error instanceof NotFoundError) return new Problem("not-found", error.message);
  if (error instanceof ConflictError) return new Problem("conflict", error.message);
  if (error instanceof StorageUnavailableError) return new Problem("storage-unavailable", error.message);
  if (error instanceof CorruptRecordError)
    return new Problem("corrupt-record", error.message, { key: error.key, fields: error.issues });
  if (error instanceof ZodError) return invalidInput(error);
  const crossSlot = error instanceof CrossSlotError || (error instanceof Error && error.name === "CrossSlotError");
  if (crossSlot)
    return crossSlotProblem(error) ?? new Problem("internal", "the coordinator failed unexpectedly; see its logs");
  return remoteProblem(error) ?? new Problem("internal", "the coordinator failed unexpectedly; see its logs");
}

/** The store's errors whose problem does not depend on fields an RPC would not carry back. */
const REMOTE_KINDS: Record<string, "not-found" | "conflict" | "storage-unavailable"> = {
  NotFoundError: "not-found",
  ConflictError: "conflict",
  StorageUnavailableError: "storage-unavailable",
};

/**
 * A store's error that another Durable Object threw, as its RPC brings it back: an Error with
 * the name and message, no longer of its class. Mapped as the error itself would be (a context
 * gone while the Dispatcher explained a flow's waiting jobs is a 404, not a 500).
 */
function remoteProblem(error: unknown): Problem | undefined {
  if (!(error instanceof Error) || !("remote" in error)) return undefined;
  const kind = REMOTE_KINDS[error.name];
  return kind ? new Problem(kind, error.message) : undefined;
}

/** One field at fault: where it is as the client sees it (`body.jobs.0.script`), and what is wrong. */
export interface FieldError {
  field: string;
  message: string;
}

/**
 * The 400 invalid-input problem: `field` names the first field at fault, `errors` all of them
 * (at least one). `detail` defaults to "<first field>: <its message>".
 */
export function fieldProblem(errors: FieldError[], detail?: string): Problem {
  const first = errors[0] as FieldError;
  return new Problem("invalid-input", detail ?? `${first.field}: ${first.message}`, { field: first.field, errors });
}

/** A 400 naming every field a schema refused, under `where` (body, param, query, params …). */
export function invalidInput(error: ZodError, where = "body"): Problem {
  const errors = error.issues.map((issue) => ({
    field: [where, ...issue.path.map(String)].join("."),
    message: issueMessage(issue),
  }));
  // A failed parse always has an issue; should one ever come without, name the whole input.
  return fieldProblem(errors.length > 0 ? errors : [{ field: where, message: "invalid" }]);
}
