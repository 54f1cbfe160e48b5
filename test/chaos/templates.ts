import type { CoordinatorClient } from "../../shared/client/index.js";
import type { TemplateFileInput } from "../../shared/flow/index.js";
import type { FlowView } from "../../shared/model/index.js";
import type { Random } from "../support/random.js";
import type { ChildPlan, FlowPlan, Job } from "./shapes.js";

// The soak's child flows (docs/flows.md, "Child flows"): the templates it stores in its context
// before the first flow, the child-flow jobs some random flows get, and the plan of a flow
// started from a template, which the same rules judge as the soak's own flows (rules.ts).
//
//   soak-leaf v1: src (a saga's step) → each (a map over src's 3 files) ┐
//                 src → rest (a 1 s sleep) ─────────────────────────────┴→ sum
//                 check-doomed (runs, and fails on purpose, when the input `fail` is true)
//   soak-leaf v2: v1, and hold: a 25 s wait for an event nobody sends (skipped when it times
//                 out), so that a cancel finds the child running
//   soak-nest:     pre (a saga's step) → inner (a child flow: soak-leaf, the latest) → post
//   soak-nest-bad: soak-nest whose inner child is started with `fail: true`
//
// Nested ones run at depth 2 under a soak flow; every job is a script the test runners run,
// retried as the soak's own jobs are.

/** The wait of soak-leaf v2: long enough that a child nobody cancels plainly outlives its parent. */
export const HOLD_S = 25;

/** Each template's latest version once the soak stored them: what a start that names none gets. */
export const LATEST: Readonly<Record<string, number>> = { "soak-leaf": 2, "soak-nest": 1, "soak-nest-bad": 1 };

/** The event soak-leaf v2 waits for, which nobody sends. */
const NEVER = "soak.never";

/** The lists the maps of soak-leaf go over: three items. */
const FILES = JSON.stringify({ files: JSON.stringify(["a", "b", "c"]) });

/** The soak's templates' jobs (retried `retries` times): soak-leaf's (of `version`), or soak-nest's. */
function templateJobs(name: string, version: number, retries: number): Job[] {
  const script = { script: "true", script_type: "sh" as const, retries };
  if (name === "soak-leaf") {
    const jobs: Job[] = [
      { name: "src", ...script, env_vars: { ADD_RESULT: FILES }, compensate: { ...script } },
      { name: "each", ...script, depends: ["src"], map: { over: "src.files" } },
      { name: "rest", sleep: 1, depends: ["src"] },
      { name: "sum", ...script, depends: ["each", "rest"] },
      { name: "check-doomed", ...script, retries: 1, when: 'inputs.fail == "true"' },
    ];
    if (version >= 2)
      jobs.push({
        name: "hold",
        wait: { event: NEVER, key: "${inputs.tag}.hold", timeout: HOLD_S, on_timeout: "skip" },
      });
    return jobs;
  }
  return [
    { name: "pre", ...script, compensate: { ...script } },
    { name: "inner", flow: innerFlow(name), depends: ["pre"] },
    { name: "post", ...script, depends: ["inner"] },
  ];
}

/** What soak-nest's inner job starts: soak-leaf's latest, or (soak-nest-bad) v1 failing. */
function innerFlow(name: string): NonNullable<Job["flow"]> {
  return name === "soak-nest-bad"
    ? { template: "soak-leaf", version: 1, inputs: { tag: "nested", fail: true } }
    : { template: "soak-leaf", inputs: { tag: "nested" } };
}

/** The template files the soak stores, in order: soak-leaf v1 and v2, soak-nest, soak-nest-bad. */
function templateFiles(retries: number, timeouts: TemplateFileInput["timeouts"]): [string, TemplateFileInput][] {
  const leaf = (version: number): TemplateFileInput => ({
    description: `the soak's leaf child flow, version ${version}`,
    inputs: { fail: { type: "boolean", default: false }, tag: { type: "string", default: "leaf" } },
    env_vars: { TAG: "${inputs.tag}" },
    timeouts,
    jobs: templateJobs("soak-leaf", version, retries),
  });
  const nest = (name: string): TemplateFileInput => ({
    description: "a soak child flow whose job is a child flow itself",
    timeouts,
    jobs: templateJobs(name, 1, retries),
  });
  return [
    ["soak-leaf", leaf(1)],
    ["soak-leaf", leaf(2)],
    ["soak-nest", nest("soak-nest")],
    ["soak-nest-bad", nest("soak-nest-bad")],
  ];
}

/**
 * Stores the soak's templates in its context (before any fault): soak-leaf as versions 1 and 2,
 * then soak-nest and soak-nest-bad, which start soak-leaf themselves.
 */
export async function putTemplates(
  client: CoordinatorClient,
  ctx: number,
  retries: number,
  timeouts: TemplateFileInput["timeouts"],
): Promise<string[]> {
  const put: string[] = [];
  for (const [name, file] of templateFiles(retries, timeouts)) {
    const answer = await client.templates.put(ctx, name, file);
    put.push(`${name} v${answer.version}`);
  }
  // The judges take a child started without a version to be of the latest (LATEST).
  const latest = Object.entries(LATEST).map(([name, v]) => `${name} v${v}`);
  if (latest.some((l) => !put.includes(l))) throw new Error(`templates stored as ${put.join(", ")}, not ${latest}`);
  return put;
}

/**
 * Makes some of a soak flow's jobs child flows, two flows in five: one job (two, sometimes) that
 * runs a plain script and that no `when` or wait key reads a result of becomes `flow: {template,
 * version?, inputs}` — soak-leaf (its latest, or version 1; failing on purpose, one in five),
 * soak-nest or soak-nest-bad. A child that fails on purpose may be allowed to fail. So that a
 * parent's end finds its children running: one such flow in three without a doomed job gets one,
 * beside the first child-flow job (the same dependencies), which fails the flow as the child
 * starts; and half of those without waits (whose events a cancel would take the place of) are
 * cancelled 0.3-4 s after their submission, with `compensate` or without (a saga always with:
 * sagas.ts judges those).
 */
export function withChildren(random: Random, plan: FlowPlan, prefix: string): FlowPlan {
  if (random() >= 0.4) return plan;
  const read = new Set([
    ...Object.values(plan.conditions).flatMap((c) => (c.on === "result" ? [c.dep] : [])),
    ...plan.waits.filter((w) => w.keyFrom === "dep").map((w) => w.key.slice(0, w.key.lastIndexOf("."))),
  ]);
  const able = plan.jobs.filter(
    (j) =>
      j.script !== undefined &&
      j.map === undefined &&
      !plan.doomed.includes(j.name as string) &&
      !read.has(j.name as string) &&
      j.name !== `${prefix}-cleanup`,
  );
  const children: ChildPlan[] = [];
  for (let n = random() < 0.25 ? 2 : 1; n > 0 && able.length > 0; n--) {
    const job = able.splice(Math.floor(random() * able.length), 1)[0] as Job;
    const child = pickChild(random, job.name as string);
    delete job.script;
    delete job.script_type;
    delete job.retries;
    job.flow = { template: child.template, ...(child.version ? { version: child.version } : {}), inputs: child.inputs };
    if (child.fails && random() < 0.4) job.allow_failure = true;
    children.push(child);
  }
  if (children.length === 0) return plan;
  plan.children = children;
  const first = plan.jobs.find((j) => j.name === children[0]?.job) as Job;
  if (plan.doomed.length === 0 && random() < 1 / 3) {
    const name = `${prefix}-sibling-doomed`;
    plan.jobs.push({ name, script: "true", script_type: "sh", retries: 1, depends: [...(first.depends ?? [])] });
    plan.doomed.push(name);
  }
  if (plan.waits.length === 0 && plan.cancel === undefined && random() < 0.5)
    plan.cancel = {
      afterMs: Math.round(300 + random() * 3_700),
      twice: random() < 0.3,
      compensate: plan.compensated.length > 0 || random() < 0.5,
    };
  return plan;
}

/** Which template a child-flow job starts, with which version and inputs, and whether it fails so. */
function pickChild(random: Random, job: string): ChildPlan {
  const r = random();
  if (r < 0.6) {
    const fails = random() < 0.2;
    const version = random() < 0.5 ? 1 : undefined;
    return { job, template: "soak-leaf", ...(version ? { version } : {}), inputs: { tag: job, fail: fails }, fails };
  }
  if (r < 0.85) return { job, template: "soak-nest", inputs: {}, fails: false };
  return { job, template: "soak-nest-bad", inputs: {}, fails: true };
}

/**
 * The plan of a child flow, from its view (the template and version it was started from, its
 * inputs as its env's INPUT_ variables), for rules.ts to judge as any soak flow: soak-leaf's
 * check-doomed runs (and fails on purpose) only when `fail` is true, its map has three items;
 * soak-nest's inner job is a child flow, failing in soak-nest-bad. Any child may have been
 * cancelled by its parent. Undefined for a flow from no template of the soak's.
 */
export function childPlan(view: FlowView, retries: number): FlowPlan | undefined {
  const origin = view.template;
  if (!origin || !["soak-leaf", "soak-nest", "soak-nest-bad"].includes(origin.name)) return undefined;
  const leaf = origin.name === "soak-leaf";
  const fails = leaf && view.env_vars.INPUT_FAIL === "true";
  const { template, version, inputs } = innerFlow(origin.name);
  const inner: ChildPlan = {
    job: "inner",
    template,
    ...(version ? { version } : {}),
    inputs: inputs ?? {},
    fails: false,
  };
  return {
    jobs: templateJobs(origin.name, origin.version, retries),
    env: { ...view.env_vars },
    doomed: fails ? ["check-doomed"] : [],
    conditions: leaf ? { "check-doomed": { on: "env", name: "INPUT_FAIL", equals: "true" } } : {},
    waits: [],
    sleeps: leaf ? ["rest"] : [],
    compensated: leaf ? ["src"] : ["pre"],
    cancel: { afterMs: 0, twice: false, compensate: true },
    ...(leaf ? { maps: [{ job: "each", items: 3 }] } : {}),
    ...(leaf ? {} : { children: [{ ...inner, fails: origin.name !== "soak-nest" }] }),
  };
}
