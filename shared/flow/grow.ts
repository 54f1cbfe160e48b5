import { runLength } from "./compensation.js";
import type { Draft } from "./draft.js";
import type { GrowthIds } from "./events.js";
import { instanceName, instanceSpec } from "./map.js";
import { attemptBlock, type JobState } from "./state.js";

/**
 * How a running flow grows, in a draft: new jobs join its jobs and its order (after its run's
 * jobs, before its compensations, which come last: compensation.ts), their
 * dependencies learn of them, and the shell is told what to store (`jobsAdded`: their records, in
 * the commit of the transition that adds them). Who decides whether they run is the caller
 * (outcomes.ts); this module only adds.
 */

/**
 * Adds `jobs` (new ids, waiting for their dependencies) to the flow, brought by job `by`: each
 * dependency of one gets it as a dependent. Existing jobs gain dependents only, never
 * dependencies. Returns their ids.
 */
export function addJobs(d: Draft, by: number, jobs: JobState[]): number[] {
  d.add(jobs, runLength(d.flow));
  for (const job of jobs) {
    for (const dep of job.depends) d.update(dep, { dependents: [...d.job(dep).dependents, job.id] });
  }
  const ids = jobs.map((job) => job.id);
  d.effects.push({ type: "jobsAdded", jobs: ids, by });
  return ids;
}

/**
 * A map's instances, one per item, with the ids `ids` laid out in order (job ids from `ids.job`,
 * a block of message ids each from `ids.message`): named `<map>[i]`, running the map's script with
 * the item in their environment, without dependencies (the map's ended before it expanded). Each
 * has the map as its dependent, so that its end is what closes the map (outcomes.ts). The map
 * keeps their ids; the caller dispatches them.
 */
export function addInstances(d: Draft, mapId: number, items: unknown[], ids: GrowthIds): number[] {
  const map = d.job(mapId);
  let message = ids.message;
  const instances = items.map((item, i): JobState => {
    const spec = instanceSpec(map.spec, item, i);
    const job: JobState = {
      id: ids.job + i,
      name: instanceName(map, i),
      depends: [],
      dependents: [mapId],
      spec,
      messageBase: message,
      status: "dispatched",
      attempt: 0,
      attemptFloor: 0,
      mapOf: mapId,
      itemIndex: i,
    };
    message += attemptBlock(spec);
    return job;
  });
  d.add(instances, runLength(d.flow));
  const added = instances.map((job) => job.id);
  d.update(mapId, { instances: added, deadline: undefined });
  d.effects.push({ type: "jobsAdded", jobs: added, by: mapId });
  return added;
}
