import { describe, expect, it } from "vitest";
import { FlowSubmission } from "../../shared/flow/index.js";
import { invalidInput } from "../../functions/core/errors.js";

/** The refused fields of a flow submission, as the API answers them. */
function refused(body: unknown): { field: string; message: string }[] {
  const parsed = FlowSubmission.safeParse(body);
  if (parsed.success) throw new Error("the submission was taken");
  return (invalidInput(parsed.error).extensions as { errors: { field: string; message: string }[] }).errors;
}

describe("a refused field's message", () => {
  it("names the field a typo most likely meant, at any depth, and none for a word far from every field", () => {
    const errors = refused({
      jobs: [{ name: "a", sciprt: "true", script_type: "sh", wait_: 1 }],
      timeouts: { timeuot: 5 },
      strat: true,
      frobnicate: 1,
    });
    expect(errors).toContainEqual({
      field: "body.jobs.0",
      message: expect.stringMatching(/"sciprt" \(did you mean "script"\?\)/),
    });
    expect(errors).toContainEqual({
      field: "body.timeouts",
      message: 'Unrecognized key: "timeuot" (did you mean "timeout"?)',
    });
    expect(errors).toContainEqual({
      field: "body",
      message: 'Unrecognized keys: "strat" (did you mean "start"?), "frobnicate"',
    });
  });

  it("says a missing field is missing, and the unit of a number whose name does not say it", () => {
    const errors = refused({
      jobs: [
        { name: "w", wait: { key: "k" } },
        { name: "s", sleep: -5 },
      ],
      timeouts: { retry_base_ms: -1 },
    });
    expect(errors).toContainEqual({
      field: "body.jobs.0.wait.event",
      message: "missing required field (expected string)",
    });
    expect(errors).toContainEqual({
      field: "body.jobs.1.sleep",
      message: expect.stringMatching(/^Too small.* \(sleep is in seconds\)$/),
    });
    expect(errors).toContainEqual({
      field: "body.timeouts.retry_base_ms",
      message: expect.stringMatching(/ \(retry_base_ms is in milliseconds\)$/),
    });
  });
});
