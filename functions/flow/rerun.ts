import {
  currentRun,
  messagesNeeded,
  rerunBases,
  rerunEnv,
  rerunJobs,
  rerunRefusal,
  type FlowEvent,
  type FlowState,
  type RerunAsk,
} from "../../shared/flow/index.js";
import { formatBytes, jsonBytes, SIZE_LIMITS } from "../../shared/model/index.js";
import type { Store } from "../../shared/store/index.js";
import type { RerunInput } from "../core/contracts.js";
import { fieldProblem } from "../core/errors.js";
import { Problem } from "../core/problem.js";
import { scopeConflict, type FlowScope } from "../core/scopes.js";

/**
 * The shell's side of a re-run (the machine's is shared/flow/rerun.ts): what the request names is
 * resolved and checked against the flow as it is, then each job to run again gets fresh message
 * ids, allocated here. Every refusal comes before the ids are taken, so a refused re-run uses
 * none; the machine checks the same again on the state it applies to (a race with another re-run).
 */

/** The job `from` names in the flow (an id, or a name), or a 400 naming `body.from`. */
function jobOfRef(scope: FlowScope, state: FlowState, ref: number | string): number {
  const found =
    typeof ref === "number"
      ? state.jobs.get(ref)
      : state.order.map((id) => state.jobs.job(id)).find((j) => j.name === ref);
  if (found) return found.id;
  const what = typeof ref === "number" ? `job ${ref}` : `job named ${JSON.stringify(ref)}`;
  throw fieldProblem([{ field: "body.from", message: `flow ${scope.flowId} has no ${what}` }]);
}

/** A 400 naming `body.env_vars` and the limit when the flow's env with `env` over it would pass it. */
function checkEnvRoom(state: FlowState, env: Record<string, string>): void {
  const size = jsonBytes(rerunEnv(state, env));
  if (size <= SIZE_LIMITS.env) return;
  const message = `the flow's env with these over it would be ${formatBytes(size)}, over the limit of ${formatBytes(SIZE_LIMITS.env)} as JSON (docs/limits.md)`;
  throw new Problem("invalid-input", `body.env_vars: ${message}`, {
    field: "body.env_vars",
    errors: [{ field: "body.env_vars", message }],
    limit: SIZE_LIMITS.env,
  });
}

/**
 * The 409 for a re-run the flow does not allow as asked (rerunRefusal), naming its status and, for
 * a flow, its run (`run`: what to ask with to re-run it as it is now); undefined when allowed.
 */
export function rerunConflict(scope: FlowScope, state: FlowState, ask: RerunAsk): Problem | undefined {
  const refused = rerunRefusal(state, ask);
  if (refused === undefined) return undefined;
  if (scope.job) return scopeConflict(scope, state.status, refused);
  const hint =
    ask.from === undefined && state.status === "finished" ? " (or one that ended, from a job: give `from`)" : "";
  return scopeConflict(scope, state.status, refused + hint, { run: currentRun(state) });
}

/**
 * The re-run event for what `input` asks of the flow in `state`: `from` resolved to a job id,
 * env overrides checked against the flow's room for env, the re-run checked, then the fresh
 * message ids of the jobs it runs again allocated (one command).
 */
export async function rerunEvent(
  scope: FlowScope,
  state: FlowState,
  store: Store,
  input: RerunInput = {},
): Promise<Extract<FlowEvent, { type: "rerun" }>> {
  const from = input.from === undefined ? undefined : jobOfRef(scope, state, input.from);
  if (input.env !== undefined) checkEnvRoom(state, input.env);
  const ask = { from, run: input.run };
  const conflict = rerunConflict(scope, state, ask);
  if (conflict) throw conflict;
  const again = rerunJobs(state, from);
  const needed = messagesNeeded(again.map((id) => state.jobs.job(id).spec));
  const first = await store.messages.allocateIds(state.contextId, state.callerId, needed);
  return {
    type: "rerun",
    bases: rerunBases(state, first, from),
    at: Date.now(),
    ...(from !== undefined ? { from } : {}),
    ...(input.env !== undefined ? { env: input.env } : {}),
    ...(input.run !== undefined ? { run: input.run } : {}),
  };
}
