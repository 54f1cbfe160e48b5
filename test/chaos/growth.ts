import type { FlowView } from "../../shared/model/index.js";
import type { Random } from "../support/random.js";
import type { FlowPlan, Job } from "./shapes.js";

// The soak's flows that grow while they run: a map over a list a job's result gives, and a job
// whose result adds jobs (through the test runner: ADD_RESULT and ADD_JOBS in a job's env put
// values into its result and jobs into its report). With their invariant: each map ended with one
// instance per item of its list, each instance once, and the jobs a result added joined once.

/**
 * A flow that grows: a map (a source job whose result holds a list of 0-6 items, the map over it,
 * a job after it; one map in four is doomed, its instances failing, some allowed to), or a job
 * whose result adds 1-4 jobs after it and one after them and `gate` (a job of the flow that has
 * not started when they are added; one flow in six adds a job that depends on no job, refused).
 */
export function growthShape(random: Random, prefix: string, retries: number): FlowPlan {
  const job = (name: string, depends: string[] = [], extra: Partial<Job> = {}): Job => ({
    name: `${prefix}-${name}`,
    script: "true",
    script_type: "sh",
    retries,
    depends: depends.map((d) => `${prefix}-${d}`),
    ...extra,
  });
  const plan: FlowPlan = {
    jobs: [],
    env: { MODE: "on" },
    doomed: [],
    conditions: {},
    waits: [],
    sleeps: [],
    compensated: [],
  };
  if (random() < 0.5) {
    const items = Array.from({ length: Math.floor(random() * 7) }, (_, i) => (i % 2 === 0 ? `item-${i}` : { n: i }));
    const doomed = random() < 0.25;
    const name = doomed ? "each-doomed" : "each";
    const src = job("src", [], { env_vars: { ADD_RESULT: JSON.stringify({ files: JSON.stringify(items) }) } });
    const map = job(name, ["src"], {
      map: { over: `${prefix}-src.files` },
      ...(doomed ? { retries: 1, ...(random() < 0.5 ? { allow_failure: true } : {}) } : {}),
    });
    plan.jobs.push(src, map, job("sum", [name]));
    plan.maps = [{ job: `${prefix}-${name}`, items: items.length }];
    if (doomed) plan.doomed.push(`${prefix}-${name}`);
    return plan;
  }
  const added = Array.from({ length: 1 + Math.floor(random() * 4) }, (_, i) => job(`a${i}`, ["seed"]));
  added.push(job("tail", [...added.map((a) => (a.name as string).slice(prefix.length + 1)), "gate"]));
  plan.refusedGrowth = random() < 1 / 6;
  if (plan.refusedGrowth) added.push(job("lost", ["no-such-job"]));
  plan.jobs.push(job("seed", [], { env_vars: { ADD_JOBS: JSON.stringify(added) } }), job("gate", ["seed"]));
  plan.adder = `${prefix}-seed`;
  if (!plan.refusedGrowth) plan.added = added;
  return plan;
}

/**
 * How a flow that grew must look at its end: each map that expanded has one instance per item of
 * its list, named `<map>[i]`, each ended; a map that finished lists one result per instance; the
 * jobs a result added are there exactly once each (unless the flow failed before they could
 * join), named as added and saying by whom; nothing else joined. Problems, one sentence each.
 */
export function judgeGrowth(plan: FlowPlan, view: FlowView): string[] {
  const wrong: string[] = [];
  const say = (what: string) => wrong.push(`flow ${view.id} ${view.status}: ${what}`);
  const grown = new Set<number>();
  for (const m of plan.maps ?? []) {
    const map = view.jobs.find((j) => j.key === m.job);
    if (!map) continue;
    const instances = view.jobs.filter((j) => j.map_of === map.id);
    for (const i of instances) grown.add(i.id);
    if (instances.length > 0 && instances.length !== m.items)
      say(`map ${m.job} has ${instances.length} instances for ${m.items} items`);
    const names = instances.map((i) => i.key);
    const meant = instances.map((i) => `${m.job}[${i.item_index}]`);
    if (names.join() !== meant.join() || new Set(names).size !== names.length)
      say(`map ${m.job}'s instances are ${names.join(", ")}`);
    for (const i of instances) if (!["finished", "error"].includes(i.status)) say(`instance ${i.key} is ${i.status}`);
    if (map.status === "finished") {
      const items = JSON.parse(map.result?.items ?? "null") as unknown[] | null;
      if (items?.length !== m.items) say(`map ${m.job} finished with ${items?.length} items for ${m.items}`);
    }
  }
  const adder = plan.adder ? view.jobs.find((j) => j.key === plan.adder) : undefined;
  for (const a of plan.added ?? []) {
    const found = view.jobs.filter((j) => j.key === a.name);
    for (const j of found) grown.add(j.id);
    if (found.length > 1) say(`added job ${a.name} is in it ${found.length} times`);
    const joined = adder?.status === "finished" && view.status !== "error";
    if (found.length === 0 && joined) say(`added job ${a.name} is missing, ${plan.adder} finished`);
    if (found[0] && found[0].added_by !== adder?.id)
      say(`added job ${a.name} says it was added by ${found[0].added_by}`);
  }
  const planned = new Set(plan.jobs.map((j) => j.name));
  // A compensation is a job of the flow file's own (its job's `compensate`), made at submission.
  const extra = view.jobs.filter((j) => !planned.has(j.key) && !grown.has(j.id) && j.compensates === undefined);
  if (extra.length > 0) say(`jobs joined that none planned: ${extra.map((j) => j.key).join(", ")}`);
  return wrong;
}
