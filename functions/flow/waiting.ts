import type { FlowState } from "../../shared/flow/index.js";
import { scriptTypeOf, type JobWaiting } from "../../shared/model/index.js";
import type { WaitReason } from "../core/contracts.js";
import { dispatchScopeOf, type FlowScope } from "../core/scopes.js";
import { dispatcherStub } from "../core/stubs.js";
import type { Env } from "../core/env.js";
import { waitingForRunner } from "./view.js";

/**
 * Why each job of the flow that waits for a runner waits, as the context's dispatcher sees it
 * (paused, no runner, every runner busy, runners refusing, a pull runner that has not leased it),
 * with the flow's own word on the job's last delivery.
 */
export async function explainWaiting(env: Env, scope: FlowScope, state: FlowState): Promise<Map<number, JobWaiting>> {
  const jobs = waitingForRunner(state);
  if (jobs.length === 0) return new Map();
  const wants = jobs.map((job) => ({
    scriptType: scriptTypeOf({ id: job.id, script_type: job.spec.script_type }),
    ...(job.spec.runner_id !== undefined ? { runnerId: job.spec.runner_id } : {}),
  }));
  const dispatch = dispatchScopeOf(scope);
  const reasons = await dispatcherStub(env, dispatch).explain(dispatch, wants);
  const limit = flowLimit(state);
  return new Map(
    jobs.map((job, i) => {
      const r =
        limit && (reasons[i]?.reason === "queued" || reasons[i]?.reason === "runners-busy") ? limit : reasons[i];
      const refused = job.refused ? `; last delivery: ${job.refused}` : "";
      const waiting: JobWaiting = r
        ? {
            reason: r.reason,
            detail: `${r.detail}${refused}`,
            ...(r.until !== undefined ? { until: Math.floor(r.until / 1000) } : {}),
          }
        : { reason: "queued", detail: "waiting for a runner" };
      return [job.id, waiting];
    }),
  );
}

/** Why the flow's waiting jobs wait when its max_parallel is what holds them; undefined otherwise. */
function flowLimit(state: FlowState): WaitReason | undefined {
  if (state.maxParallel === undefined) return undefined;
  const held = state.order.filter((id) => {
    const job = state.jobs.get(id);
    return job?.delivery !== undefined && (job.status === "dispatched" || job.status === "started");
  }).length;
  if (held < state.maxParallel) return undefined;
  return {
    reason: "flow-limit",
    detail: `the flow has ${held} attempts with runners, its max_parallel ${state.maxParallel}`,
  };
}

/** For a missed delivery deadline: why no runner took the job's attempt (undefined if that cannot be told). */
export async function whyUndelivered(
  env: Env,
  scope: FlowScope,
  state: FlowState,
  jobId: number,
): Promise<string | undefined> {
  try {
    return (await explainWaiting(env, scope, state)).get(jobId)?.detail;
  } catch {
    return undefined;
  }
}
