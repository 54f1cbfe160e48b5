import type { Context } from "hono";
import { ZodError } from "zod";
import {
  ConflictError,
  CorruptRecordError,
  NotFoundError,
  StorageUnavailableError,
} from "../../shared/store/index.js";
import { Problem } from "./problem.js";

/**
 * Maps whatever a handler threw to a problem: the store's named errors to their statuses, a
 * schema failure to 400 naming the field, and anything unexpected to a 500 that says no more
 * than it must (the details go to the log).
 */
export function toProblem(error: unknown): Problem {
  if (error instanceof Problem) return error;
  if (error instanceof NotFoundError) return new Problem(404, "not-found", "Not found", error.message);
  if (error instanceof ConflictError) return new Problem(409, "conflict", "Conflict", error.message);
  if (error instanceof StorageUnavailableError) {
    return new Problem(503, "storage-unavailable", "Storage unavailable", error.message);
  }
  if (error instanceof CorruptRecordError) {
    return new Problem(500, "corrupt-record", "A stored record is corrupt", error.message, {
      key: error.key,
      fields: error.issues,
    });
  }
  if (error instanceof ZodError) return invalidInput(error);
  return new Problem(500, "internal", "Internal error", "the coordinator failed unexpectedly; see its logs");
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
  return new Problem(400, "invalid-input", "Invalid input", detail ?? `${first.field}: ${first.message}`, { field: first.field, errors });
}

/** A 400 naming every field a schema refused, under `where` (body, param, query, params …). */
export function invalidInput(error: ZodError, where = "body"): Problem {
  const errors = error.issues.map((issue) => ({
    field: [where, ...issue.path.map(String)].join("."),
    message: issue.message,
  }));
  // A failed parse always has an issue; should one ever come without, name the whole input.
  return fieldProblem(errors.length > 0 ? errors : [{ field: where, message: "invalid" }]);
}

/** What a route's validator hands its hook (the part the hooks read). */
export type ValidationResult = { target: string } & ({ success: true } | { success: false; error: ZodError });

/** A failed route validation as a problem naming fields as the client sees them: body.jobs.0.script, param.contextId, … */
export function validationProblem(result: { target: string; error: ZodError }): Problem {
  return invalidInput(result.error, result.target === "json" ? "body" : result.target);
}

/** Every route's validation hook: a failed check throws the 400 naming the fields at fault. */
export function defaultHook(result: ValidationResult): void {
  if (!result.success) throw validationProblem(result);
}

/** Hono's `onError`: one place where errors become responses. */
export function onError(error: Error, c: Context): Response {
  const problem = toProblem(error);
  if (problem.status === 500) console.error(`${c.req.method} ${c.req.path}:`, error);
  else if (problem.status > 500) console.warn(`${c.req.method} ${c.req.path}: ${problem.status} ${problem.message}`);
  return problem.toResponse(c.req.path);
}
