import type { FlowSubmissionInput } from "../../shared/flow/index.js";
import type { Random } from "../support/random.js";

export type Job = FlowSubmissionInput["jobs"][number];

/**
 * A `when` as the soak writes it, kept in this form too, so the checks tell whether it held from
 * the flow's view without evaluating CEL: a dependency's result value, a dependency's status, or
 * a variable of the flow's env, equal to a text.
 */
export type Condition =
  | { on: "result"; dep: string; field: string; equals: string }
  | { on: "status"; dep: string; equals: string }
  | { on: "env"; name: string; equals: string };

/**
 * What the soak's event traffic does to a wait: sends its event once, at a random time up to its
 * timeout after it is seen waiting (some race the timeout's alarm), twice with the same id (at once or one after the other), twice with two ids; sends it early
 * (before the flow is submitted when its key is known then, else as soon as it is), late (once
 * it ended), for a wrong key only, for a wrong key then the right one; or never.
 */
export type Fate = "once" | "twice" | "two-ids" | "early" | "late" | "wrong" | "wrong-then-right" | "none";

const FATES: Fate[] = [
  "once",
  "once",
  "twice",
  "two-ids",
  "early",
  "early",
  "late",
  "wrong",
  "wrong-then-right",
  "none",
];

/** One wait of a flow and what the traffic does to it. */
export interface WaitPlan {
  /** The wait's job name. */
  job: string;
  event: string;
  /** The key its wait must resolve to when it starts; `{FLOW}` stands for the flow's id until it is known. */
  key: string;
  /** Where its key comes from: the flow's env, a dependency's result, or the flow's id. */
  keyFrom: "env" | "dep" | "flow";
  timeout: number;
  fate: Fate;
  /** The event's data's `decision` (a dependent's `when` may read it); the second of two ids says the other. */
  decision: "yes" | "no";
  /** Two sends go at once (else one after the other's answer); an early event is sent again once the wait runs. */
  together: boolean;
  /**
   * How long after the wait is seen waiting its event goes: for `once`, up to its timeout (some
   * race the timeout's alarm, some lose to it); else up to 3 s between one send and the next.
   */
  delayMs: number;
}

/**
 * A child-flow job of a flow (templates.ts): its name, the template, version (none: the latest
 * when it starts) and inputs it starts, and whether that child fails on purpose.
 */
export interface ChildPlan {
  job: string;
  template: string;
  version?: number;
  inputs: NonNullable<NonNullable<Job["flow"]>["inputs"]>;
  fails: boolean;
}

/**
 * A random flow: its jobs, its env, its doomed jobs, its conditions (by job name), its waits and
 * sleeps; a saga's jobs that have a compensation (by name), and when it is cancelled, with
 * `compensate` or not (ms after its submission; twice: the same cancel sent again at once); for one that grows (growth.ts),
 * its maps (each job's name and its list's length), the jobs a result adds (`added`, by `adder`),
 * and whether they are refused (`refusedGrowth`); its child-flow jobs (`children`).
 */
export interface FlowPlan {
  jobs: Job[];
  env: Record<string, string>;
  doomed: string[];
  conditions: Record<string, Condition>;
  waits: WaitPlan[];
  sleeps: string[];
  compensated: string[];
  cancel?: { afterMs: number; twice: boolean; compensate: boolean };
  maps?: { job: string; items: number }[];
  added?: Job[];
  adder?: string;
  refusedGrowth?: boolean;
  children?: ChildPlan[];
}

/** What the runners fail on purpose: a doomed job, and a broken job's compensation (every attempt). */
export const FAIL_MATCH = "doomed|broken\\.compensate$";

const EVENT_NAMES = ["soak.approved", "soak.paid", "soak.ready"];
const NEEDS = ["all_finished", "all_done", "any_finished", "none_failed"] as const;

/**
 * A flow of a random shape — a chain, a diamond, a fan out and in, layers, or a lone job — whose
 * job names start with `prefix`. One flow in five has a job that fails on purpose (its name
 * holds "doomed"; runners are told to fail those). Three flows in five react too (`react`): some
 * jobs wait for an event or sleep, some have `needs`, a `when`, `allow_failure`, and a clean-up.
 */
export function flowShape(random: Random, prefix: string, retries: number, events: Random): FlowPlan {
  const job = (name: string, depends: string[] = []): Job => ({
    name: `${prefix}-${name}`,
    script: "true",
    script_type: "sh",
    retries,
    depends: depends.map((d) => `${prefix}-${d}`),
  });
  const shapes: (() => Job[])[] = [
    () => Array.from({ length: 2 + Math.floor(random() * 4) }, (_, i) => job(`c${i}`, i === 0 ? [] : [`c${i - 1}`])),
    () => [job("top"), job("left", ["top"]), job("right", ["top"]), job("bottom", ["left", "right"])],
    () => {
      const width = 2 + Math.floor(random() * 5);
      const middle = Array.from({ length: width }, (_, i) => job(`m${i}`, ["src"]));
      return [
        job("src"),
        ...middle,
        job(
          "sink",
          middle.map((_, i) => `m${i}`),
        ),
      ];
    },
    () =>
      Array.from({ length: 9 }, (_, i) =>
        job(`l${i}`, i < 3 ? [] : [0, 1, 2].map((k) => `l${Math.floor(i / 3) * 3 - 3 + k}`)),
      ),
    () => [job("alone")],
  ];
  const jobs = (shapes[Math.floor(random() * shapes.length)] as () => Job[])();
  const doomed: string[] = [];
  if (random() < 0.2) {
    const victim = jobs[Math.floor(random() * jobs.length)] as Job;
    const renamed = `${victim.name}-doomed`;
    for (const j of jobs) j.depends = (j.depends ?? []).map((d) => (d === victim.name ? renamed : d));
    victim.name = renamed;
    victim.retries = 1;
    doomed.push(renamed);
  }
  const plan: FlowPlan = { jobs, env: { MODE: "on" }, doomed, conditions: {}, waits: [], sleeps: [], compensated: [] };
  // A saga's names are settled before the rules, waits and conditions name jobs.
  if (random() < 0.35) saga(random, plan, retries);
  if (random() < 0.6) react(random, prefix, plan, events);
  if (plan.compensated.length > 0 && plan.waits.length === 0 && random() < 0.25)
    plan.cancel = { afterMs: Math.round(random() * 800), twice: random() < 0.5, compensate: true };
  return plan;
}

/**
 * Makes a flow a saga: some of its jobs get a compensation (a script, retried as jobs are); in
 * one saga in four a job (not a doomed one) is broken: its compensation always fails (the flow
 * then ends compensation_failed, if it unwinds). One saga without waits in four is then
 * cancelled with `compensate` within 0.8 s of its submission (some twice at once): waits are left
 * out so that a cancel never takes an event's place.
 */
function saga(random: Random, plan: FlowPlan, retries: number): void {
  const { jobs } = plan;
  for (const j of jobs) {
    if (random() < 0.6) {
      j.compensate = { script: "true", script_type: "sh", retries };
      plan.compensated.push(j.name as string);
    }
  }
  const breakable = plan.compensated.filter((name) => !plan.doomed.includes(name));
  if (breakable.length === 0 || random() >= 0.25) return;
  const victim = pick(random, breakable);
  const renamed = `${victim}-broken`;
  for (const j of jobs) {
    j.depends = (j.depends ?? []).map((d) => (d === victim ? renamed : d));
    if (j.name === victim) j.name = renamed;
  }
  plan.compensated[plan.compensated.indexOf(victim)] = renamed;
}

const pick = <T>(random: Random, items: readonly T[]): T => items[Math.floor(random() * items.length)] as T;

/**
 * Makes a flow react: up to two of its jobs (not a doomed one) wait for an event (2-8 s, some
 * skipped on timeout, some allowed to fail, the key from the env, a dependency's result or the
 * flow's id), some sleep 0-3 s; some jobs get `needs`, some a `when` over a dependency's result
 * (true or false), status or the env; a doomed job may be allowed to fail; some flows end with a
 * clean-up (`needs: all_done`) after their last jobs. Jobs stay in an order where each comes
 * after its dependencies (the checks walk them so).
 */
function react(random: Random, prefix: string, plan: FlowPlan, events: Random): void {
  const { jobs, doomed } = plan;
  const named = (name: string) => jobs.find((j) => j.name === name) as Job;
  const isScript = (j: Job) => j.script !== undefined;
  const toWait: Job[] = [];
  for (const j of jobs) {
    if (doomed.includes(j.name as string)) continue;
    const r = random();
    if (r < 0.25 && toWait.length < 2) toWait.push(j);
    else if (r < 0.37) {
      asNoScript(j);
      j.sleep = Math.floor(random() * 4);
      plan.sleeps.push(j.name as string);
    }
  }
  if (random() < 0.35) {
    const sinks = jobs.filter((j) => !jobs.some((k) => (k.depends ?? []).includes(j.name as string)));
    jobs.push({ ...cleanupOf(prefix, sinks), needs: "all_done" });
  }
  for (const j of jobs) {
    const depends = (j.depends ?? []).map(String);
    if (depends.length > 0 && j.needs === undefined && random() < 0.3) j.needs = pick(random, NEEDS);
    if (j.name === `${prefix}-cleanup`) continue; // a clean-up runs whatever happened: no `when`
    if (random() < (depends.length > 0 ? 0.3 : 0.15)) {
      const condition = conditionFor(random, j, depends.map(named), toWait);
      plan.conditions[j.name as string] = condition;
      j.when = cel(condition);
    }
  }
  for (const [i, j] of toWait.entries()) {
    const deps = (j.depends ?? []).map(String).map(named);
    const keyDep = (j.needs ?? "all_finished") === "all_finished" ? deps.find(isScript) : undefined;
    const from = pick(random, keyDep ? (["env", "dep", "flow"] as const) : (["env", "flow"] as const));
    const suffix = `w${i}`;
    let template: string;
    let key: string;
    if (from === "env") {
      plan.env[`KEY_W${i}`] = `${prefix}.${suffix}`;
      [template, key] = [`\${KEY_W${i}}`, `${prefix}.${suffix}`];
    } else if (from === "dep") {
      const dep = keyDep?.name as string;
      [template, key] = [`\${DEP_${dep.toUpperCase().replace(/[^A-Z0-9_]/g, "_")}_JOB}.${suffix}`, `${dep}.${suffix}`];
    } else [template, key] = [`flow\${FLOW_ID}.${suffix}`, `flow{FLOW}.${suffix}`];
    const event = pick(random, EVENT_NAMES);
    const timeout = 2 + Math.floor(random() * 7);
    asNoScript(j);
    j.wait = { event, key: template, timeout, ...(random() < 0.4 ? { on_timeout: "skip" as const } : {}) };
    if (random() < 0.3) j.allow_failure = true;
    const fate = pick(events, FATES);
    plan.waits.push({
      job: j.name as string,
      event,
      key,
      keyFrom: from,
      timeout,
      fate,
      decision: events() < 0.5 ? "yes" : "no",
      together: events() < 0.5,
      delayMs: Math.round(events() * 1000 * (fate === "once" ? timeout : 3)),
    });
  }
  for (const name of doomed) if (random() < 0.5) named(name).allow_failure = true;
}

/** A job that runs no script: what made it one is taken off. */
function asNoScript(j: Job): void {
  delete j.script;
  delete j.script_type;
  delete j.retries;
}

function cleanupOf(prefix: string, sinks: Job[]): Job {
  return {
    name: `${prefix}-cleanup`,
    script: "true",
    script_type: "sh",
    retries: 4,
    depends: sinks.map((s) => s.name as string),
  };
}

/**
 * A `when` for job `j`: over a dependency's result when every dependency must have finished (a
 * script's `job`, equal to its name or not; a wait's `decision`, the event's data), over a
 * dependency's status when all ended first (`all_done`, `none_failed`), else over the env.
 */
function conditionFor(random: Random, j: Job, deps: Job[], waits: Job[]): Condition {
  const needs = j.needs ?? "all_finished";
  const usable = deps.filter((d) => !(d.name as string).endsWith("-doomed") && d.sleep === undefined);
  if (needs === "all_finished" && usable.length > 0 && random() < 0.8) {
    const dep = pick(random, usable);
    if (waits.includes(dep)) return { on: "result", dep: dep.name as string, field: "decision", equals: "yes" };
    const name = dep.name as string;
    return { on: "result", dep: name, field: "job", equals: random() < 0.5 ? name : `${name}.not` };
  }
  if ((needs === "all_done" || needs === "none_failed") && deps.length > 0 && random() < 0.8) {
    const dep = pick(random, deps);
    return { on: "status", dep: dep.name as string, equals: pick(random, ["finished", "skipped", "error"]) };
  }
  return { on: "env", name: "MODE", equals: random() < 0.6 ? "on" : "off" };
}

/** The CEL text of a condition. */
function cel(c: Condition): string {
  if (c.on === "result")
    return `deps[${JSON.stringify(c.dep)}][${JSON.stringify(c.field)}] == ${JSON.stringify(c.equals)}`;
  if (c.on === "status") return `status[${JSON.stringify(c.dep)}] == ${JSON.stringify(c.equals)}`;
  return `env.${c.name} == ${JSON.stringify(c.equals)}`;
}
