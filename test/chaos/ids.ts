import type { FlowView } from "../../shared/model/index.js";
import { runsIn } from "../support/flow-runs.js";
import type { SoakFlow } from "./invariants.js";
import type { Found } from "./reactions.js";

/** The soak's name of a top-level flow, `f<n>`, from a job's name (`f<n>-…`); undefined for a template's job. */
function soakName(job: string): string | undefined {
  return /^(f\d+)-/.exec(job)?.[1];
}

/**
 * No flow id was given to two flows. A context's flow ids come from its counter, one INCR in the
 * creation's script. On a Redis Cluster whose master stalled past the node timeout, the writes it
 * acknowledged on waking are lost, the counter's among them, and a later creation is given an id
 * already handed out (docs/deploy.md, "What a failover can lose"): the soak's records of that id
 * then name another flow, and the invariants that judge it fail. This one names such ids, so those
 * failures can be told from others. Seen as: a submission refused 409 as its id was a live flow's
 * (`taken`, the details of those refusals); two submissions answered the same id; jobs of one of
 * the soak's flows run under an id it was not given (the runners' lines, `f<n>-…`); a job's child
 * flow under a top-level flow's id.
 */
export function idsGivenOnce(
  flows: SoakFlow[],
  views: Map<number, FlowView>,
  outputs: string[],
  taken: string[],
): Found {
  const given = new Map<number, string>();
  const twice = new Map<number, string>();
  for (const refused of taken) twice.set(Number(/\d+/.exec(refused)?.[0]), `refused a submission: ${refused}`);
  for (const { view, plan } of flows) {
    const name = soakName(String(plan.jobs[0]?.name ?? "")) ?? "?";
    if (given.has(view.id)) twice.set(view.id, `answered to ${given.get(view.id)} and ${name}`);
    given.set(view.id, name);
  }
  const runs = runsIn(...outputs);
  for (const run of runs) {
    const name = soakName(run.job);
    if (name && given.get(run.flow) !== name && !twice.has(run.flow))
      twice.set(
        run.flow,
        `given to ${given.get(run.flow) ?? "a child flow"}, and ${name}'s job ${run.job} ran under it`,
      );
  }
  let children = 0;
  for (const view of views.values())
    for (const job of view.jobs) {
      if (job.child_flow_id === undefined) continue;
      children++;
      if (given.has(job.child_flow_id) && !twice.has(job.child_flow_id))
        twice.set(
          job.child_flow_id,
          `given to ${given.get(job.child_flow_id)}, and to flow ${view.id}'s child (job ${job.key})`,
        );
    }
  return {
    held: twice.size === 0,
    detail:
      twice.size === 0
        ? `${given.size} flows' ids, ${runs.length} runs and ${children} child flows' ids: none given twice`
        : [...twice].map(([id, how]) => `flow id ${id} ${how}`).join("; "),
  };
}
