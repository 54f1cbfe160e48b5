import type { Context } from "hono";
import { HTTPException } from "hono/http-exception";
import type { ZodError } from "zod";
import { invalidInput, toProblem } from "../core/errors.js";
import { Problem } from "../core/problem.js";

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

/** A client error Hono itself raised (a body that is not JSON, the wrong media type) as a problem. */
function fromHttpException(error: HTTPException): Problem {
  return error.status === 415
    ? new Problem("unsupported-media-type", "send the body as JSON with content-type: application/json", {
        field: "header.content-type",
      })
    : new Problem("bad-request", error.message || "the request could not be read", { field: "body" });
}

/** Hono's `onError`: one place where errors become responses. */
export function onError(error: Error, c: Context): Response {
  const problem = error instanceof HTTPException && error.status < 500 ? fromHttpException(error) : toProblem(error);
  if (problem.status === 500) console.error(`${c.req.method} ${c.req.path}:`, error);
  else if (problem.status > 500) console.warn(`${c.req.method} ${c.req.path}: ${problem.status} ${problem.message}`);
  return problem.toResponse(c.req.path);
}
