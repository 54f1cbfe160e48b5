import { z } from "zod";
import { Id } from "./common.js";
import { TEMPLATE_LIMITS, TemplateName } from "./template.js";

/*
 * Child flows (docs/flows.md, "Child flows"): a job that starts a flow from a stored template in
 * its own context, waits for that flow's end and ends with it.
 */

/** How deep flows may nest: a flow started by a job is one level deeper than the job's flow. */
export const MAX_CHILD_DEPTH = 5;

/** A child flow's inputs by name: JSON values. */
export type ChildInputs = Record<string, string | number | boolean | null | object>;

/**
 * What a child-flow job starts: a template of the same context by name, a version (unset: the
 * latest when the job starts), the inputs its start gives (checked then, as any start's) and how
 * long the child may run (`timeout`, seconds; unset: as long as the child's own deadline lets it).
 */
export const ChildFlowSpec = z
  .object({
    template: TemplateName,
    version: z.int().min(1).optional(),
    // JSON values, checked against the template's declarations when the job starts. Typed
    // shallow (ChildInputs): a job's record crosses Durable Object RPC, whose types refuse
    // `unknown` and recurse without end on a JSON type (as the OpenAPI generator does on z.json()).
    inputs: (
      z.record(z.string().max(64), z.unknown()).refine((m) => Object.keys(m).length <= TEMPLATE_LIMITS.inputs, {
        message: `a start gives at most ${TEMPLATE_LIMITS.inputs} inputs`,
      }) as unknown as z.ZodType<ChildInputs>
    ).default({}),
    /** How long the child may run, in seconds from the job's start: past it, the child is cancelled and the job fails. */
    timeout: z.int().min(1).max(31_536_000).optional(),
  })
  // No schema id: the request's shape (inputs optional) and the answer's differ, and OpenRPC
  // takes one shape per name; each place spells it out.
  .strict();
export type ChildFlowSpec = z.output<typeof ChildFlowSpec>;

/**
 * Which job of which flow started this flow, by which attempt, and how deep it is (1 for a child
 * of a top-level flow). Kept on the child's record and shown on its view.
 */
export const FlowParent = z
  .object({
    flow_id: Id,
    job_id: Id,
    attempt: z.int().min(1),
    depth: z.int().min(1).max(MAX_CHILD_DEPTH),
  })
  .strict()
  .meta({ id: "FlowParent" });
export type FlowParent = z.infer<typeof FlowParent>;
