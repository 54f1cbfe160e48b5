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

/** A 400 naming every field at fault (`field` is the first, `errors` all of them). */
export function invalidInput(error: ZodError, where = "body"): Problem {
  const errors = error.issues.map((issue) => ({
    field: [where, ...issue.path.map(String)].join("."),
    message: issue.message,
  }));
  const first = errors[0] ?? { field: where, message: "invalid" };
  return new Problem(400, "invalid-input", "Invalid input", `${first.field}: ${first.message}`, {
    field: first.field,
    errors,
  });
}

/** Hono's `onError`: one place where errors become responses. */
export function onError(error: Error, c: Context): Response {
  const problem = toProblem(error);
  if (problem.status === 500) console.error(`${c.req.method} ${c.req.path}:`, error);
  else if (problem.status > 500) console.warn(`${c.req.method} ${c.req.path}: ${problem.status} ${problem.message}`);
  return problem.toResponse(c.req.path);
}
