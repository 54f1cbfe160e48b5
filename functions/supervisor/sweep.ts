import { callRedis, type Store } from "../../shared/store/index.js";
import { unwrap } from "../api/problem.js";
import { storeFor } from "../api/store.js";
import { publicOrigin } from "../config.js";
import type { Env } from "../env.js";
import { wakeDispatcher } from "../dispatch/scope.js";
import { coordinatorStub, scopeFor, type ScopeBase, type ScopeTarget } from "../flow/scope.js";

/** What one sweep did, for logs and tests. */
export interface SweepReport {
  contexts: number;
  poked: number;
  /** Contexts that could not be swept this time (storage away): they stay due. */
  failed: number;
}

const CONTEXTS_PER_SWEEP = 50;
const FLOWS_PER_CONTEXT = 100;
const MSG_OUT_RECHECK_MS = 30_000;

/**
 * What a member of a context's deadline set names: the inverse of `deadlineMember`
 * (shared/store/flow-plan.ts), which writes `flow:<id>` for a flow and `job:<caller>:<id>` for a
 * job outside any flow. Null for anything else.
 */
function parseDeadlineMember(member: string): ScopeTarget | null {
  const flow = /^flow:(\d+)$/.exec(member);
  if (flow) return { flowId: Number(flow[1]) };
  const job = /^job:(\d+):(\d+)$/.exec(member);
  return job ? { callerId: Number(job[1]), jobId: Number(job[2]) } : null;
}

/**
 * The supervisor's sweep (cron, every minute): the backstop behind each flow's alarm and each
 * context's dispatcher. It reads one sorted set of contexts that have something due; when
 * nothing is due that one command is all it costs. For a due context it wakes the context's
 * dispatcher (which also looks for claims left unsettled), pokes every flow whose check time
 * passed (the flow's Durable Object settles what it left pending and acts on its deadlines),
 * and reschedules the context. Overlapping sweeps are harmless: wakes and pokes are idempotent.
 */
export async function sweep(env: Env, now = Date.now()): Promise<SweepReport> {
  const store = storeFor(env);
  const due = await callRedis(() =>
    store.redis.exec<string[]>(["ZRANGEBYSCORE", store.keys.sweepDue(), "-inf", String(now), "LIMIT", "0", String(CONTEXTS_PER_SWEEP)]),
  );
  const report: SweepReport = { contexts: due.length, poked: 0, failed: 0 };
  for (const contextId of due.map(Number)) {
    try {
      report.poked += await sweepContext(env, store, contextId, now);
    } catch (error) {
      // One context's trouble (storage away, an object that cannot answer) does not hold up the
      // others; it stays due, and the next sweep tries it again.
      report.failed++;
      console.warn(`sweep: context ${contextId}: ${(error as Error).message}`);
    }
  }
  return report;
}

async function sweepContext(env: Env, store: Store, contextId: number, now: number): Promise<number> {
  const base: ScopeBase = { prefix: store.keys.prefix, origin: publicOrigin(env) };
  await wakeDispatcher(env, { ...base, contextId }, { work: true, mail: true, reap: true });
  const members = await callRedis(() =>
    store.redis.exec<string[]>(["ZRANGEBYSCORE", store.keys.deadlines(contextId), "-inf", String(now), "LIMIT", "0", String(FLOWS_PER_CONTEXT)]),
  );
  for (const member of members) {
    const target = parseDeadlineMember(member);
    if (!target) continue;
    const scope = scopeFor(base, contextId, target);
    unwrap(await coordinatorStub(env, scope).tick(scope));
  }
  const [first, waiting, inflight] = await callRedis(async () => {
    const p = store.redis.pipeline();
    p.zrange(store.keys.deadlines(contextId), 0, 0, { withScores: true });
    p.llen(store.keys.msgOut(contextId));
    p.zrange(store.keys.inflight(contextId), 0, 0, { withScores: true });
    return (await p.exec()) as [string[], number, string[]];
  });
  // Due again at the nearest of: a flow's check time, leftovers in msg_out, a delivery to settle.
  const next = Math.min(
    first.length === 2 ? Number(first[1]) : Infinity,
    Number(waiting) > 0 ? now + MSG_OUT_RECHECK_MS : Infinity,
    inflight.length === 2 ? Number(inflight[1]) + 1_000 : Infinity,
  );
  await callRedis(() =>
    Number.isFinite(next)
      ? store.redis.exec(["ZADD", store.keys.sweepDue(), String(Math.max(next, now + 1000)), String(contextId)])
      : store.redis.exec(["ZREM", store.keys.sweepDue(), String(contextId)]),
  );
  return members.length;
}
