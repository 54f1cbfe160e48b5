import type { EnvVars, ResultMap } from "../model/index.js";
import { mapListOf } from "./map.js";
import { jobKey, type FlowState, type JobState } from "./state.js";

/** Makes a job key or result key usable in an environment variable name. */
function envSafe(text: string): string {
  return text.toUpperCase().replace(/[^A-Z0-9_]/g, "_");
}

/**
 * A job's inputs: each dependency's result by the dependency's key (name, or id when unnamed),
 * in the order of its `depends`; what `FLOW_INPUTS` holds as JSON. A compensation's input is
 * the result of the job it undoes (the compensations it waited for only ordered it). A map that
 * finished gives the list of its instances' results (null for one that did not finish); a map's
 * instance has its map's inputs.
 */
export function jobInputs(flow: FlowState, job: JobState): Record<string, ResultMap | unknown[]> {
  const inputs: Record<string, ResultMap | unknown[]> = {};
  const undone = job.spec.compensates !== undefined ? flow.jobs.job(job.spec.compensates) : undefined;
  if (undone) {
    inputs[jobKey(undone)] = mapListOf(undone) ?? undone.result ?? {};
    return inputs;
  }
  for (const depId of dependsOf(flow, job)) {
    const dep = flow.jobs.job(depId);
    inputs[jobKey(dep)] = mapListOf(dep) ?? dep.result ?? {};
  }
  return inputs;
}

/**
 * A job's dependencies' results as stored, by key: what a `when` reads as `deps` (a map's is its
 * `items`, the JSON list as text, since a condition's values are strings).
 */
export function jobResults(flow: FlowState, job: JobState): Record<string, ResultMap> {
  const results: Record<string, ResultMap> = {};
  for (const depId of dependsOf(flow, job)) {
    const dep = flow.jobs.job(depId);
    results[jobKey(dep)] = dep.result ?? {};
  }
  return results;
}

/** The jobs whose results a job reads: its dependencies, or for a map's instance the map's. */
function dependsOf(flow: FlowState, job: JobState): number[] {
  return job.mapOf !== undefined ? (flow.jobs.get(job.mapOf)?.depends ?? []) : job.depends;
}

/**
 * The environment a job runs with, built when its attempt is delivered (never stored: the flow's
 * variables are kept once in its record, the results once in their jobs'):
 * 1. the flow's `env_vars`, overridden by the job's own `env_vars`;
 * 2. then what the coordinator provides, which wins: `FLOW_ID`, `CONTEXT_ID`, `JOB_ID`,
 *    `JOB_NAME` (when named), `JOB_ATTEMPT`, `TRACE_ID` (the flow's W3C trace id);
 * 3. the results of the job's dependencies: `FLOW_INPUTS` is a JSON object
 *    `{ "<dependency name or id>": { "<key>": "<value>" } }`, and each value is also
 *    `DEP_<DEPENDENCY>_<KEY>` (upper-cased, anything but letters, digits and _ turned into _);
 *    how each dependency ended is `DEP_<DEPENDENCY>_STATUS` (finished, error or skipped: a job
 *    whose `needs` let it run past a failure or a skip reads it there). A map's list of results
 *    is `DEP_<MAP>` (JSON) and a list in `FLOW_INPUTS`;
 * 4. for a compensation, the job it undoes: `COMPENSATE_JOB` (its key), `COMPENSATE_RESULT` (its
 *    result as JSON) and each of its result values as `COMPENSATE_<KEY>` (it is also the
 *    compensation's one input: `FLOW_INPUTS`, `DEP_<JOB>_<KEY>`);
 * 5. a map's instance has its map's inputs, and its item as `ITEM` and `ITEM_INDEX` (in its own
 *    `env_vars`, map.ts).
 */
export function jobEnvironment(flow: FlowState, job: JobState): EnvVars {
  const env: EnvVars = { ...flow.envVars, ...job.spec.env_vars };
  env.FLOW_ID = String(flow.id);
  env.CONTEXT_ID = String(flow.contextId);
  env.JOB_ID = String(job.id);
  if (job.name) env.JOB_NAME = job.name;
  env.JOB_ATTEMPT = String(job.attempt);
  if (flow.traceId) env.TRACE_ID = flow.traceId;
  const inputs = jobInputs(flow, job);
  for (const [key, result] of Object.entries(inputs)) {
    if (Array.isArray(result)) env[`DEP_${envSafe(key)}`] = JSON.stringify(result);
    else for (const [name, value] of Object.entries(result)) env[`DEP_${envSafe(key)}_${envSafe(name)}`] = value;
  }
  for (const depId of dependsOf(flow, job)) {
    const dep = flow.jobs.job(depId);
    env[`DEP_${envSafe(jobKey(dep))}_STATUS`] = dep.status;
  }
  env.FLOW_INPUTS = JSON.stringify(inputs);
  if (job.spec.compensates !== undefined)
    Object.assign(env, compensateEnvironment(flow.jobs.get(job.spec.compensates)));
  return env;
}

/**
 * What a compensation is told of the job it undoes: each of its result values, then its key and
 * its result as JSON (which win over result keys named `job` or `result`).
 */
function compensateEnvironment(undone: JobState | undefined): EnvVars {
  if (!undone) return {};
  const result = undone.result ?? {};
  const env: EnvVars = {};
  for (const [name, value] of Object.entries(result)) env[`COMPENSATE_${envSafe(name)}`] = value;
  env.COMPENSATE_JOB = jobKey(undone);
  env.COMPENSATE_RESULT = JSON.stringify(result);
  return env;
}
