import { z } from "zod";
import { InputDeclarations, TEMPLATE_LIMITS, type InputValues } from "../model/index.js";
import {
  inputUse,
  inputVariable,
  resolveInputs,
  childInputs,
  rewriteInputs,
  substituteInputs,
  type InputIssue,
  type TextsOfJob,
} from "./inputs.js";
import { FlowSubmissionFields, withDeadlineChecks, type FlowSubmissionInput } from "./submission.js";

/*
 * A flow template's file (docs/templates.md): a flow file without `id` and `start` (each start
 * makes a new flow, and says whether to start it), with `inputs:` declared and an optional
 * `description`. Its texts may name the inputs: `${inputs.<name>}` in a wait's key, a
 * `sleep_until` and `env_vars` values, `inputs.<name>` in a `when`. A start checks the inputs it
 * is given and turns the file into a flow submission (`instantiate`).
 */

/** The checks of a template across its fields: inputs named are declared, no job ids, no INPUT_ variable set by hand. */
function checkTemplateFile(
  file: {
    env_vars: Record<string, string>;
    jobs: (TextsOfJob & { id?: number | undefined })[];
    inputs: Record<string, unknown>;
  },
  ctx: z.RefinementCtx,
): void {
  const declared = Object.keys(file.inputs);
  const which = declared.length > 0 ? `it declares ${declared.join(", ")}` : "it declares none";
  for (const issue of inputUse(file, (name) =>
    Object.hasOwn(file.inputs, name)
      ? undefined
      : `names the input ${name}, which the template does not declare (${which})`,
  ))
    ctx.addIssue({ code: "custom", ...issue });
  const variables = new Map(declared.map((name) => [inputVariable(name), name]));
  const setByHand = (env: Record<string, string>, path: (string | number)[]) => {
    for (const name of Object.keys(env)) {
      const input = variables.get(name);
      if (input !== undefined)
        ctx.addIssue({ code: "custom", path: [...path, name], message: `${name} is set by the input ${input}` });
    }
  };
  setByHand(file.env_vars, ["env_vars"]);
  file.jobs.forEach((job, i) => {
    if (job.id !== undefined)
      ctx.addIssue({
        code: "custom",
        path: ["jobs", i, "id"],
        message: "a template's jobs take no id: each start makes new jobs (depend on names)",
      });
    setByHand(job.env_vars, ["jobs", i, "env_vars"]);
  });
}

/** `PUT /v1/contexts/{c}/templates/{name}`: the template's flow file, stored as a new version once validated. */
export const TemplateFile = withDeadlineChecks(
  FlowSubmissionFields.omit({ id: true, start: true }).extend({
    description: z.string().max(TEMPLATE_LIMITS.description).optional(),
    inputs: InputDeclarations.default({}),
  }),
)
  .superRefine(checkTemplateFile)
  .meta({ id: "TemplateFile" });
export type TemplateFile = z.output<typeof TemplateFile>;
export type TemplateFileInput = z.input<typeof TemplateFile>;

/** A flow submission made from a template: everything but `id` and `start`. */
export type InstantiatedFlow = Omit<FlowSubmissionInput, "id" | "start">;

/**
 * A start of `file` with the inputs `given`: the inputs checked (issues name `inputs.<name>`),
 * each one's text set as `INPUT_<NAME>` in the flow's env_vars, and every `${inputs.<name>}`
 * rewritten (inputs.ts): to the value in env_vars values and child flows' inputs, to
 * `${INPUT_<NAME>}` in waits' keys and `sleep_until`s. Pure; the result is checked as any submission is.
 */
export function instantiate(
  file: TemplateFile,
  given: InputValues,
): { flow: InstantiatedFlow } | { issues: InputIssue[] } {
  const resolved = resolveInputs(file.inputs, given);
  if ("issues" in resolved) return resolved;
  const { values } = resolved;
  const env = (vars: Record<string, string>) =>
    Object.fromEntries(Object.entries(vars).map(([name, value]) => [name, substituteInputs(value, values)]));
  const { inputs: _inputs, description: _description, ...flow } = file;
  return {
    flow: {
      ...flow,
      env_vars: {
        ...env(file.env_vars),
        ...Object.fromEntries(Object.entries(values).map(([name, text]) => [inputVariable(name), text])),
      },
      jobs: file.jobs.map((job) => ({
        ...job,
        env_vars: env(job.env_vars),
        ...(job.compensate ? { compensate: { ...job.compensate, env_vars: env(job.compensate.env_vars) } } : {}),
        ...(job.wait ? { wait: { ...job.wait, key: rewriteInputs(job.wait.key) } } : {}),
        ...(job.sleep_until !== undefined ? { sleep_until: rewriteInputs(job.sleep_until) } : {}),
        ...(job.flow ? { flow: { ...job.flow, inputs: childInputs(job.flow.inputs, values, file.inputs) } } : {}),
      })),
    },
  };
}
