import { MAP_ITEMS_MAX, type EnvVars, type ResultMap } from "../model/index.js";
import { ENDED } from "./draft.js";
import { FLOW_LIMITS } from "./submission.js";
import { jobKey, type FlowState, type JobSpec, type JobState } from "./state.js";

/**
 * Maps: a job with `map: {over: "<dependency>.<key>"}` runs its script once per item of the JSON
 * list that dependency's result holds under that key. Pure helpers of the machine: where the list
 * comes from, what each instance is, and how the map ends once its instances did
 * (docs/flows.md, "Map").
 */

/**
 * Which dependency a map's `over` names, and the result key: `candidates[i]` are the names
 * dependency i is known by (its name, its id, the reference the flow file gave); the longest one
 * that `over` starts with, followed by a dot, wins (job names may hold dots themselves).
 */
export function overSource(over: string, candidates: string[][]): { dep: number; key: string } | undefined {
  let best: { dep: number; key: string; length: number } | undefined;
  candidates.forEach((names, dep) => {
    for (const name of names) {
      if (!over.startsWith(`${name}.`) || name.length + 1 >= over.length) continue;
      if (!best || name.length > best.length) best = { dep, key: over.slice(name.length + 1), length: name.length };
    }
  });
  return best && { dep: best.dep, key: best.key };
}

/** The names a job of a flow is known by in a map's `over`: its name, and its id. */
function namesOf(job: JobState): string[] {
  return job.name !== undefined ? [job.name, String(job.id)] : [String(job.id)];
}

/**
 * The list a map runs over, read from its dependency's result when the map starts, or why there
 * is none: the dependency did not finish, has no such key, holds no JSON list there, a list
 * longer than MAP_ITEMS_MAX, or one whose instances would take the flow past its job limit.
 */
export function mapItems(flow: FlowState, job: JobState): { items: unknown[] } | { error: string } {
  const over = job.spec.map?.over ?? "";
  const deps = job.depends.map((id) => flow.jobs.job(id));
  const source = overSource(over, deps.map(namesOf));
  if (!source) return { error: `map over ${JSON.stringify(over)}: it names none of its dependencies` };
  const dep = deps[source.dep] as JobState;
  if (dep.status !== "finished")
    return { error: `map over ${over}: dependency ${jobKey(dep)} did not finish (${dep.status}): nothing to map over` };
  const text = dep.result?.[source.key];
  if (text === undefined) return { error: `map over ${over}: ${jobKey(dep)}'s result has no ${source.key}` };
  let items: unknown;
  try {
    items = JSON.parse(text);
  } catch {
    return { error: `map over ${over}: the value is not JSON (a JSON list is expected)` };
  }
  if (!Array.isArray(items)) return { error: `map over ${over}: the value is not a JSON list` };
  if (items.length > MAP_ITEMS_MAX)
    return {
      error: `map over ${over}: the list has ${items.length} items, over the limit of ${MAP_ITEMS_MAX} for a map (docs/limits.md)`,
    };
  const total = flow.order.length + items.length;
  if (total > FLOW_LIMITS.jobsPerFlow)
    return {
      error: `map over ${over}: its ${items.length} instances would take the flow to ${total} jobs, over the limit of ${FLOW_LIMITS.jobsPerFlow} (docs/limits.md)`,
    };
  return { items };
}

/** The list of map `id` of the flow (as `mapItems`), or undefined when it is no map or has none. */
export function mapItemsOf(flow: FlowState, id: number): unknown[] | undefined {
  const job = flow.jobs.get(id);
  if (!job || job.spec.map === undefined) return undefined;
  const list = mapItems(flow, job);
  return "items" in list ? list.items : undefined;
}

/** The name of a map's instance i: `<map>[i]` (the map's name, else its id). */
export function instanceName(map: Pick<JobState, "id" | "name">, index: number): string {
  return `${jobKey(map)}[${index}]`;
}

/**
 * What an instance runs: the map's script and rules, with the item in its environment (`ITEM`:
 * the item itself when it is a string, else its JSON; `ITEM_INDEX`: its place in the list). It
 * has no dependencies of its own (the map's had ended when it was made), so no `when` and no map.
 */
export function instanceSpec(spec: JobSpec, item: unknown, index: number): JobSpec {
  const { map: _map, when: _when, ...rest } = spec;
  const value = typeof item === "string" ? item : JSON.stringify(item);
  return { ...rest, env_vars: { ...spec.env_vars, ITEM: value, ITEM_INDEX: String(index) } };
}

/** An instance's own variables: its item (what its record keeps; the rest is its map's). */
export function itemVars(env: EnvVars): EnvVars {
  return {
    ...(env["ITEM"] !== undefined ? { ITEM: env["ITEM"] } : {}),
    ...(env["ITEM_INDEX"] !== undefined ? { ITEM_INDEX: env["ITEM_INDEX"] } : {}),
  };
}

/**
 * An instance's spec from its record, which keeps only its item (`own`: ITEM, ITEM_INDEX) and
 * what every job's record has, and its map's spec, which gives the script and the variables.
 */
export function instanceSpecOf(map: JobSpec, own: JobSpec): JobSpec {
  const { map: _map, when: _when, ...rest } = map;
  return { ...rest, timeout: own.timeout, retries: own.retries, env_vars: { ...map.env_vars, ...own.env_vars } };
}

/** Whether a job is a map that expanded and is waiting for its instances. */
export function awaitsInstances(job: JobState): boolean {
  return job.instances !== undefined && !ENDED.has(job.status);
}

/**
 * How a map whose instances all ended ends (undefined while one still runs): finished with every
 * instance's result as a JSON list in `items` (null for an instance that did not finish), or in
 * error when one failed and the map may not fail (`allow_failure` unset), naming the first.
 */
export function mapOutcome(flow: FlowState, map: JobState): { result: ResultMap } | { error: string } | undefined {
  const instances = (map.instances ?? []).map((id) => flow.jobs.job(id));
  if (instances.some((job) => !ENDED.has(job.status))) return undefined;
  const failed = instances.find((job) => job.status !== "finished");
  if (failed && !map.spec.allow_failure)
    return {
      error: `instance ${jobKey(failed)} ${failed.status === "skipped" ? "was skipped" : "failed"}: ${failed.error ?? failed.skipReason ?? ""}`,
    };
  const items = instances.map((job) => (job.status === "finished" ? (job.result ?? {}) : null));
  return { result: { items: JSON.stringify(items) } };
}

/**
 * A map's result as its dependents read it: the list of its instances' results (`FLOW_INPUTS`,
 * `DEP_<MAP>`, a `when`'s `deps.<map>`), or undefined for any other job.
 */
export function mapListOf(job: JobState): unknown[] | undefined {
  if (job.spec.map === undefined || job.status !== "finished") return undefined;
  try {
    const items = JSON.parse(job.result?.["items"] ?? "[]") as unknown;
    return Array.isArray(items) ? items : [];
  } catch {
    return [];
  }
}
