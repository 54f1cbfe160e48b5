import { describe, expect, it } from "vitest";
import {
  FlowSubmission,
  inputsOfEnv,
  instantiate,
  resolveInputs,
  rewriteInputs,
  substituteInputs,
  TemplateFile,
  type TemplateFileInput,
} from "../../shared/flow/index.js";
import { conditionInputs } from "../../shared/flow/expression.js";
import type { InputDeclaration } from "../../shared/model/index.js";
import { started, T } from "./flow-sim.js";

// A flow template's inputs, pure: checking a start's values against the declarations, the texts
// rewritten (wait keys and sleep_until to ${INPUT_X}, env values to the value), what a template
// file may name, and a template's flow run by the machine: its wait key and its `when` read the
// inputs from the flow's INPUT_ variables.

const declared: Record<string, InputDeclaration> = {
  region: { type: "string", default: "eu" },
  count: { type: "number" },
  dry: { type: "boolean", required: false },
  extra: { type: "json", default: { a: [1, 2] } },
};

/** A template file parsed as a PUT would be; throws on issues. */
function template(file: TemplateFileInput) {
  const parsed = TemplateFile.safeParse(file);
  if (!parsed.success) throw new Error(JSON.stringify(parsed.error.issues));
  return parsed.data;
}

/** The issues a template file is refused with, as `path: message`. */
function refused(file: unknown): string[] {
  const parsed = TemplateFile.safeParse(file);
  return parsed.success ? [] : parsed.error.issues.map((i) => `${i.path.join(".")}: ${i.message}`);
}

describe("the inputs of a start", () => {
  it("takes the values given, the defaults for the rest, and leaves out an optional one not given", () => {
    expect(resolveInputs(declared, { count: 3 })).toEqual({
      values: { region: "eu", count: "3", extra: '{"a":[1,2]}' },
    });
    // A string is its own text, whatever the type; anything else is JSON.
    expect(resolveInputs(declared, { count: 1.5, region: "us", dry: false, extra: "x" })).toEqual({
      values: { region: "us", count: "1.5", dry: "false", extra: "x" },
    });
  });

  it("names every input at fault: not declared, of the wrong type, required and missing", () => {
    const out = resolveInputs(declared, { nope: 1, region: 7, dry: "yes", extra: undefined });
    expect(out).toEqual({
      issues: [
        {
          field: "inputs.nope",
          message: "the template declares no input nope (it declares region, count, dry, extra)",
        },
        { field: "inputs.region", message: "must be a string, not number 7" },
        { field: "inputs.count", message: "required (number)" },
        { field: "inputs.dry", message: 'must be true or false, not the string "yes"' },
      ],
    });
    expect(resolveInputs(declared, { count: Number.NaN })).toEqual({
      issues: [{ field: "inputs.count", message: "must be a number, not number NaN" }],
    });
    expect(resolveInputs({}, { a: 1 })).toEqual({
      issues: [{ field: "inputs.a", message: "the template declares no input a (it declares none)" }],
    });
  });
});

describe("texts naming inputs", () => {
  it("rewrites ${inputs.x} to ${INPUT_X} where jobs resolve variables, leaving escapes and other names", () => {
    expect(rewriteInputs("${inputs.region}-${DEP_A_ID}-$${inputs.region}-${inputs.max_n}")).toBe(
      "${INPUT_REGION}-${DEP_A_ID}-$${inputs.region}-${INPUT_MAX_N}",
    );
  });

  it("puts the value into env values: an escape gives the literal, an optional input not given nothing", () => {
    expect(substituteInputs("at ${inputs.region}; $${inputs.region}; ${HOME}; [${inputs.dry}]", { region: "eu" })).toBe(
      "at eu; ${inputs.region}; ${HOME}; []",
    );
  });

  it("reads the inputs of a when from the INPUT_ variables, by lower-case name", () => {
    expect(inputsOfEnv({ INPUT_REGION: "eu", INPUT_MAX_N: "3", INPUTX: "no", input_lower: "no", OTHER: "x" })).toEqual({
      region: "eu",
      max_n: "3",
    });
  });

  it("finds the inputs a when names, by selection or by index", () => {
    expect(
      conditionInputs('inputs.region == "eu" && has(inputs.dry) || inputs["count"] == "2" || env.X == "1"'),
    ).toEqual(["region", "dry", "count"]);
  });
});

describe("a template file", () => {
  const jobs = [{ name: "a", script: "true", script_type: "sh" as const }];

  it("refuses inputs it does not declare, wherever they are named", () => {
    expect(
      refused({
        inputs: { region: { type: "string" } },
        env_vars: { WHERE: "${inputs.where}" },
        jobs: [
          { name: "w", wait: { event: "e", key: "${inputs.region}/${inputs.key}" } },
          { name: "s", sleep_until: "${inputs.when}", env_vars: { X: "${inputs.x}" } },
          { name: "c", script: "true", script_type: "sh", when: 'inputs.mode == "on"' },
        ],
      }),
    ).toEqual([
      "env_vars.WHERE: names the input where, which the template does not declare (it declares region)",
      "jobs.0.wait.key: names the input key, which the template does not declare (it declares region)",
      "jobs.1.sleep_until: names the input when, which the template does not declare (it declares region)",
      "jobs.1.env_vars.X: names the input x, which the template does not declare (it declares region)",
      "jobs.2.when: names the input mode, which the template does not declare (it declares region)",
    ]);
  });

  it("refuses job ids, INPUT_ variables an input sets, bad names, defaults of another type, required with a default", () => {
    expect(
      refused({
        inputs: {
          region: { type: "string", default: 3 },
          n: { type: "number", default: 1, required: true },
          Bad: { type: "string" },
          t: { type: "date" },
        },
        env_vars: { INPUT_REGION: "x" },
        jobs: [{ id: 9, name: "a", script: "true", script_type: "sh", env_vars: { INPUT_N: "1" } }],
      }),
    ).toEqual([
      "inputs.region.default: the default must be a string, not number 3",
      "inputs.n.required: an input with a default is never missing",
      'inputs.t.type: Invalid option: expected one of "string"|"number"|"boolean"|"json"',
      "inputs.Bad: an input's name: lower-case letters, digits and _, starting with a letter, at most 64",
    ]);
    // The checks across fields run once the fields themselves parse.
    expect(
      refused({
        inputs: { region: { type: "string" }, n: { type: "number" } },
        env_vars: { INPUT_REGION: "x" },
        jobs: [{ id: 9, name: "a", script: "true", script_type: "sh", env_vars: { INPUT_N: "1" } }],
      }),
    ).toEqual([
      "env_vars.INPUT_REGION: INPUT_REGION is set by the input region",
      "jobs.0.id: a template's jobs take no id: each start makes new jobs (depend on names)",
      "jobs.0.env_vars.INPUT_N: INPUT_N is set by the input n",
    ]);
    expect(refused({ jobs, id: 3, start: true })).toEqual([': Unrecognized keys: "id", "start"']);
    expect(refused({ jobs, inputs: { x: { type: "string" } }, env_vars: { A: "${inputs.X}" } })).toEqual([]);
    expect(refused({ jobs: [{ name: "w", wait: { event: "e", key: "${inputs.X}" } }] })).toEqual([
      "jobs.0.wait: key: ${inputs.X} does not name an input (lower-case letters, digits and _, starting with a letter)",
    ]);
  });

  it("is refused as a plain flow where a job would resolve an input it cannot have", () => {
    const plain = FlowSubmission.safeParse({
      env_vars: { A: "${inputs.a}" },
      jobs: [
        { name: "w", wait: { event: "e", key: "k-${inputs.region}" } },
        { name: "s", sleep_until: "${inputs.at}" },
        { name: "c", script: "true", script_type: "sh", when: 'inputs.mode == "on"' },
      ],
    });
    expect(plain.error?.issues.map((i) => `${i.path.join(".")}: ${i.message}`)).toEqual([
      "jobs.0.wait.key: names the input region (${inputs.region}): inputs are declared by flow templates only (docs/templates.md)",
      "jobs.1.sleep_until: names the input at (${inputs.at}): inputs are declared by flow templates only (docs/templates.md)",
    ]);
  });
});

describe("a flow made from a template", () => {
  const file = template({
    inputs: {
      order: { type: "string" },
      mode: { type: "string", default: "slow" },
      limit: { type: "number", default: 5 },
    },
    env_vars: { LABEL: "order ${inputs.order} ($${inputs.order})" },
    jobs: [
      { name: "paid", wait: { event: "order.paid", key: "${inputs.order}", timeout: 60 } },
      { name: "fast", depends: ["paid"], when: 'inputs.mode == "fast" && int(inputs.limit) > 3', sleep: 0 },
      { name: "later", depends: ["paid"], sleep_until: "${inputs.mode}", env_vars: { M: "${inputs.mode}!" } },
    ],
  });

  it("holds the inputs as INPUT_ variables and the rewritten texts, and is a valid submission", () => {
    const made = instantiate(file, { order: "42" });
    if (!("flow" in made)) throw new Error(JSON.stringify(made.issues));
    expect(made.flow.env_vars).toEqual({
      LABEL: "order 42 (${inputs.order})",
      INPUT_ORDER: "42",
      INPUT_MODE: "slow",
      INPUT_LIMIT: "5",
    });
    const [paid, fast, later] = made.flow.jobs;
    expect(paid?.wait?.key).toBe("${INPUT_ORDER}");
    expect(fast?.when).toBe('inputs.mode == "fast" && int(inputs.limit) > 3');
    expect([later?.sleep_until, later?.env_vars]).toEqual(["${INPUT_MODE}", { M: "slow!" }]);
    expect(FlowSubmission.safeParse({ ...made.flow, start: true }).error?.issues ?? []).toEqual([]);
    expect(instantiate(file, { mode: 3 })).toEqual({
      issues: [
        { field: "inputs.order", message: "required (string)" },
        { field: "inputs.mode", message: "must be a string, not number 3" },
      ],
    });
  });

  it("passes its inputs to a child flow's inputs: whole references typed, others as text, unknown ones refused", () => {
    const parent = template({
      inputs: {
        region: { type: "string" },
        days: { type: "number", default: 3 },
        dry: { type: "boolean", required: false },
      },
      jobs: [
        {
          name: "sub",
          flow: {
            template: "report",
            inputs: {
              region: "${inputs.region}",
              days: "${inputs.days}",
              dry: "${inputs.dry}",
              title: "r-${inputs.region}",
              n: 1,
            },
          },
        },
      ],
    });
    const made = instantiate(parent, { region: "us" });
    if (!("flow" in made)) throw new Error(JSON.stringify(made.issues));
    expect(made.flow.jobs[0]?.flow?.inputs).toEqual({ region: "us", days: 3, title: "r-us", n: 1 });
    expect(refused({ jobs: [{ name: "sub", flow: { template: "t", inputs: { a: "${inputs.nope}" } } }] })).toEqual([
      "jobs.0.flow.inputs.a: names the input nope, which the template does not declare (it declares none)",
    ]);
    const plain = FlowSubmission.safeParse({
      jobs: [{ name: "sub", flow: { template: "t", inputs: { a: "${inputs.x}" } } }],
    });
    expect(plain.error?.issues.map((i) => i.path.join("."))).toEqual(["jobs.0.flow.inputs.a"]);
  });

  it("waits for the key its input gives, and runs or skips by a when over its inputs", () => {
    for (const [mode, status] of [
      ["fast", "finished"],
      ["slow", "skipped"],
    ] as const) {
      const made = instantiate(file, { order: "42", mode });
      if (!("flow" in made)) throw new Error(JSON.stringify(made.issues));
      const flow = FlowSubmission.parse({ ...made.flow, start: true });
      const d = started(flow.jobs.slice(0, 2), { envVars: flow.env_vars });
      expect(d.job(100)).toMatchObject({ status: "started", waitKey: "42" });
      d.send({ type: "event", job: 100, id: "e1", name: "order.paid", key: "42", data: {}, at: T + 10 });
      expect(d.job(101).status).toBe(status === "finished" ? "started" : "skipped");
    }
  });
});
