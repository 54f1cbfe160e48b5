import type { z } from "zod";
import {
  inputRequired,
  inputTypeProblem,
  type EnvVars,
  type InputDeclaration,
  type InputValues,
} from "../model/index.js";
import { conditionInputs } from "./expression.js";
import { INPUT_REFERENCE, VARIABLE } from "./template.js";

/*
 * A flow template's inputs (docs/templates.md), pure. A start gives values by name; they are
 * checked against the template's declarations, defaults fill in the rest, and each becomes a
 * variable of the flow's environment, `INPUT_<NAME>` (upper-cased; a string as it is, any other
 * value as JSON text). Texts of the template that name an input as `${inputs.<name>}` are then
 * rewritten: where `${…}` is resolved when a job starts (a wait's key, a `sleep_until`) to
 * `${INPUT_<NAME>}`, so the value is read from the flow's environment like any variable; in
 * `env_vars` values, which nothing resolves later, to the value itself. A `when` reads them as
 * `inputs.<name>`, a map built from the same variables (inputsOfEnv). So the environment is the
 * one place the values live: a flow run again with another INPUT_ variable sees the new value
 * everywhere.
 */

/** The environment variable an input's value goes into: `INPUT_<NAME>`. */
export function inputVariable(name: string): string {
  return `INPUT_${name.toUpperCase()}`;
}

/** An input's value as its variable holds it: a string as it is, anything else as JSON text. */
export function inputText(value: unknown): string {
  return typeof value === "string" ? value : JSON.stringify(value);
}

const INPUT_VARIABLE = /^INPUT_([A-Z][A-Z0-9_]*)$/;

/** The `inputs` map of a `when`: every `INPUT_<NAME>` variable of `env`, by its input's (lower-case) name. */
export function inputsOfEnv(env: EnvVars): Record<string, string> {
  const inputs: Record<string, string> = {};
  for (const [name, value] of Object.entries(env)) {
    const m = INPUT_VARIABLE.exec(name);
    if (m) inputs[(m[1] as string).toLowerCase()] = value;
  }
  return inputs;
}

/** The inputs a text names as `${inputs.<name>}` (a `$${` escape names none), in order, each once. */
export function inputReferences(text: string): string[] {
  const names = new Set<string>();
  for (const match of text.matchAll(VARIABLE)) {
    if (match[1] === "$") continue;
    const input = INPUT_REFERENCE.exec(match[2] as string);
    if (input) names.add(input[1] as string);
  }
  return [...names];
}

/**
 * A text resolved when a job starts (a wait's key, a `sleep_until`) with each `${inputs.<name>}`
 * rewritten to `${INPUT_<NAME>}`; `$${…}` escapes stay for the job's start to unescape.
 */
export function rewriteInputs(text: string): string {
  return text.replace(VARIABLE, (whole: string, escaped: string, name: string) => {
    const input = escaped === "$" ? null : INPUT_REFERENCE.exec(name);
    return input ? `\${${inputVariable(input[1] as string)}}` : whole;
  });
}

/**
 * An `env_vars` value with each `${inputs.<name>}` replaced by the input's text, or by nothing
 * for an optional input not given; `$${inputs.<name>}` gives the literal `${inputs.<name>}`.
 * Other `${…}` are not touched: an env value is not a template of its own.
 */
export function substituteInputs(text: string, values: Record<string, string>): string {
  return text.replace(VARIABLE, (whole: string, escaped: string, name: string) => {
    const input = INPUT_REFERENCE.exec(name);
    if (!input) return whole;
    if (escaped === "$") return `\${${name}}`;
    return values[input[1] as string] ?? "";
  });
}

/**
 * A child-flow job's inputs with the template's inputs put in: a value that is exactly
 * `${inputs.<name>}` takes that input's value with its type (a number stays a number; an optional
 * input not given leaves the child's input out, so the child's default applies); a text that
 * names inputs among other text has each replaced by its text (substituteInputs). Other values
 * are passed as they are.
 */
export function childInputs(
  inputs: Record<string, unknown>,
  values: Record<string, string>,
  declared: Record<string, InputDeclaration>,
): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  for (const [name, value] of Object.entries(inputs)) {
    if (typeof value !== "string") {
      out[name] = value;
      continue;
    }
    const whole = /^\$\{inputs\.([a-z][a-z0-9_]{0,63})\}$/.exec(value)?.[1];
    if (whole === undefined) out[name] = substituteInputs(value, values);
    else if (values[whole] !== undefined)
      out[name] = declared[whole]?.type === "string" ? values[whole] : JSON.parse(values[whole]);
  }
  return out;
}

/** One input at fault: `inputs.<name>` (or `inputs`), and why. */
export interface InputIssue {
  field: string;
  message: string;
}

/**
 * The inputs of a start checked against the declarations: an input not declared, a value of the
 * wrong type, a required one missing are issues naming `inputs.<name>`. Otherwise each input's
 * text (given, else its default; an optional one without either is left out).
 */
export function resolveInputs(
  declared: Record<string, InputDeclaration>,
  given: InputValues,
): { values: Record<string, string> } | { issues: InputIssue[] } {
  const issues: InputIssue[] = [];
  for (const name of Object.keys(given)) {
    if (!Object.hasOwn(declared, name)) {
      const known = Object.keys(declared);
      const which = known.length > 0 ? `it declares ${known.join(", ")}` : "it declares none";
      issues.push({ field: `inputs.${name}`, message: `the template declares no input ${name} (${which})` });
    }
  }
  const values: Record<string, string> = {};
  for (const [name, input] of Object.entries(declared)) {
    const value = Object.hasOwn(given, name) ? given[name] : input.default;
    if (value === undefined) {
      if (inputRequired(input)) issues.push({ field: `inputs.${name}`, message: `required (${input.type})` });
      continue;
    }
    const wrong = inputTypeProblem(input.type, value);
    if (wrong) issues.push({ field: `inputs.${name}`, message: wrong });
    else values[name] = inputText(value);
  }
  return issues.length > 0 ? { issues } : { values };
}

/** What of a job may name inputs. */
export interface TextsOfJob {
  wait?: { key: string } | undefined;
  sleep_until?: string | undefined;
  when?: string | undefined;
  env_vars: Record<string, string>;
  /** Its compensation's own env_vars (a template's inputs are put into them as into the job's). */
  compensate?: { env_vars: Record<string, string> } | undefined;
  /** A child-flow job's inputs (their texts may name the template's inputs). */
  flow?: { inputs: Record<string, unknown> } | undefined;
}

/** What of a flow may name inputs. */
export interface TextsOfFlow {
  env_vars: Record<string, string>;
  jobs: TextsOfJob[];
}

/** Where one job's texts may name inputs, and how each is read. */
function jobTexts(job: TextsOfJob): { path: (string | number)[]; names: string[] }[] {
  const texts: { path: (string | number)[]; names: string[] }[] = [];
  if (job.wait) texts.push({ path: ["wait", "key"], names: inputReferences(job.wait.key) });
  if (job.sleep_until !== undefined) texts.push({ path: ["sleep_until"], names: inputReferences(job.sleep_until) });
  if (job.when !== undefined) texts.push({ path: ["when"], names: conditionInputs(job.when) });
  for (const [name, value] of Object.entries(job.env_vars))
    texts.push({ path: ["env_vars", name], names: inputReferences(value) });
  for (const [name, value] of Object.entries(job.compensate?.env_vars ?? {}))
    texts.push({ path: ["compensate", "env_vars", name], names: inputReferences(value) });
  for (const [name, value] of Object.entries(job.flow?.inputs ?? {}))
    if (typeof value === "string") texts.push({ path: ["flow", "inputs", name], names: inputReferences(value) });
  return texts;
}

/** Issues of a flow's texts that name inputs it may not: `allowed(name)` says which it may. */
export function inputUse(
  flow: TextsOfFlow,
  allowed: (name: string) => string | undefined,
): { path: (string | number)[]; message: string }[] {
  const texts = Object.entries(flow.env_vars).map(([name, value]) => ({
    path: ["env_vars", name] as (string | number)[],
    names: inputReferences(value),
  }));
  flow.jobs.forEach((job, i) => {
    for (const text of jobTexts(job)) texts.push({ path: ["jobs", i, ...text.path], names: text.names });
  });
  return texts.flatMap(({ path, names }) =>
    names.flatMap((name) => {
      const why = allowed(name);
      return why ? [{ path, message: why }] : [];
    }),
  );
}

/**
 * Refuses a wait's key, a `sleep_until` or a child flow's input of a flow submission that names an input: only a
 * template declares them, and the job would fail when it starts. (An `env_vars` value is plain
 * text in a flow; a `when` may read `inputs`, the flow's INPUT_ variables, in any flow.)
 */
export function withoutInputs<T extends z.ZodType<TextsOfFlow>>(schema: T) {
  return schema.superRefine((flow, ctx) => {
    const refused = inputUse(
      flow,
      (name) =>
        `names the input ${name} (\${inputs.${name}}): inputs are declared by flow templates only (docs/templates.md)`,
    );
    for (const issue of refused)
      if (issue.path.includes("wait") || issue.path.includes("flow") || issue.path.at(-1) === "sleep_until")
        ctx.addIssue({ code: "custom", ...issue });
  });
}
