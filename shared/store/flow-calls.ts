import type { Keys } from "../keys.js";
import { claimSection, commitOutcome, type CommitClaim, type CommitOutcome } from "./commit-claims.js";
import { ConflictError, NotFoundError } from "./errors.js";
import type { CommitPlan } from "./flow-plan.js";
import { callRedis, type Redis } from "./redis.js";
import { commitFlow, createFlow } from "./scripts/flow.js";

/** Claims a commit makes in its own script call (see commit-claims.ts): never part of a pending plan. */
export interface ClaimsOfCommit {
  contextId: number;
  flowId: number;
  claims: CommitClaim[];
  /** The claims' slot score (epoch ms); now by default. */
  now?: number;
  /**
   * The keys of the commit the claims follow, when the call is a creation's (they come last in
   * its keys, and the claims' key positions count from them, as its sections' do).
   */
  commitKeys?: string[];
}

/**
 * The script call that stores a new flow (see FlowStore.creation): `creates` lists its jobs'
 * ids in order and `caller` is their actor, to name a job whose id was taken.
 */
export interface Creation {
  keys: string[];
  args: string[];
  creates: number[];
  caller: number;
}

/** A plan as `runPlan` takes it: a commit's (one call or several), or a creation's with its commit. */
export type RunnablePlan = Pick<CommitPlan, "keys" | "args"> &
  Partial<Pick<CommitPlan, "more" | "sections" | "sweepDue">> &
  Partial<Pick<Creation, "creates" | "caller">>;

/**
 * Runs a commit plan's script, or a creation's (FlowStore.creation), with `claims` appended to it
 * (commit-claims.ts); returns the sections that were skipped as already written and what the
 * claims did. A creation refused throws ConflictError: kind "flow" when another flow holds
 * the id, "job" when a chosen job id is taken (nothing was written). With `record` (the
 * flow's hash, or a job's outside any flow, and its incarnation token) a commit writes only
 * while that hash holds the token, else throws NotFoundError (nothing was written). A plan of
 * several calls (`more`, commit-calls.ts) runs them in order, the claims with the last; the
 * sections skipped are numbered over all of them.
 */
export async function runPlan(
  redis: Redis,
  keys: Keys,
  plan: RunnablePlan,
  claims?: ClaimsOfCommit,
  record?: { key: string; token: string },
): Promise<CommitOutcome> {
  const more = plan.more ?? [];
  const first = await runCall(redis, keys, plan, more.length === 0 ? claims : undefined, record);
  if (more.length === 0) return afterCalls(redis, keys, plan, first);
  const skipped = [...first.skipped];
  // The first call's sections: the plan's, less those of the calls after it.
  let offset = (plan.sections ?? 0) - more.reduce((sum, call) => sum + call.sections, 0);
  let last = first;
  for (const [i, call] of more.entries()) {
    const lastCall = i === more.length - 1;
    last = await runCall(
      redis,
      keys,
      call,
      lastCall && claims ? { ...claims, commitKeys: call.keys } : undefined,
      record,
    );
    skipped.push(...last.skipped.map((s) => s + offset));
    offset += call.sections;
  }
  return afterCalls(redis, keys, plan, { ...last, skipped });
}

/**
 * On a Redis Cluster, the sweep's due set learns of the plan's starts once the calls are written
 * (before, a sweep could find nothing yet and take the context out again). A failure here fails
 * the commit as an outage does: its plan stays pending and runs again whole, its sections
 * skipped as written, this write made then (ZADD LT: repeating it changes nothing).
 */
async function afterCalls(
  redis: Redis,
  keys: Keys,
  plan: RunnablePlan,
  outcome: CommitOutcome,
): Promise<CommitOutcome> {
  const due = plan.sweepDue;
  if (due) {
    await callRedis(() => redis.exec(["ZADD", keys.sweepDue(), "LT", String(due.at), String(due.contextId)]));
  }
  return outcome;
}

/** One call of a plan: a creation's (with `creates`), or a commit's. */
async function runCall(
  redis: Redis,
  keys: Keys,
  plan: Pick<CommitPlan, "keys" | "args"> & Partial<Pick<Creation, "creates" | "caller">>,
  claims: ClaimsOfCommit | undefined,
  record: { key: string; token: string } | undefined,
): Promise<CommitOutcome> {
  const section =
    claims && claims.claims.length > 0
      ? claimSection(
          keys,
          claims.commitKeys ?? plan.keys,
          claims.contextId,
          claims.flowId,
          claims.claims,
          claims.now ?? Date.now(),
        )
      : undefined;
  const callKeys = section ? [...plan.keys, ...section.keys] : plan.keys;
  const args = section ? [...plan.args, ...section.args] : plan.args;
  if (plan.creates) {
    const reply = await createFlow.run(redis, callKeys, args);
    if (Array.isArray(reply)) return commitOutcome(reply.slice(1), claims?.claims ?? []);
    const code = Number(reply);
    if (code === -1) throw new ConflictError("flow", plan.args[0] as string);
    const jobId = plan.creates[-code - 2];
    throw new ConflictError("job", String(jobId), `job id ${jobId} is taken by another job of actor ${plan.caller}`);
  }
  if (plan.args.length === 0) return { skipped: [], waiting: undefined, claimed: [], invalid: [] };
  const reply = record
    ? await commitFlow.run(redis, [record.key, ...callKeys], ["T", record.token, ...args])
    : await commitFlow.run(redis, callKeys, args);
  if (record && Number(reply) === -1) throw new NotFoundError("record", record.key);
  return commitOutcome(Array.isArray(reply) ? reply : [], claims?.claims ?? []);
}
