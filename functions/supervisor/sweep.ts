import { callRedis, type Store } from "../../shared/store/index.js";
import { unwrap } from "../api/problem.js";
import { storeFor } from "../api/store.js";
import { coordinatorKeys } from "../coordinator-key.js";
import type { Env } from "../env.js";
import { MessageOwners } from "../flow/owners.js";
import { relay } from "../flow/relay.js";
import { coordinatorName, type FlowScope } from "../flow/scope.js";

/** What one sweep did, for logs and tests. */
export interface SweepReport {
  contexts: number;
  relayed: number;
  poked: number;
}

const CONTEXTS_PER_SWEEP = 50;
const FLOWS_PER_CONTEXT = 100;
const MSG_OUT_RECHECK_MS = 30_000;

/** The scope of a deadline-set member: `flow:<id>` or `job:<caller>:<id>`. */
function scopeOf(member: string, prefix: string, contextId: number, origin: string): FlowScope | null {
  const flow = /^flow:(\d+)$/.exec(member);
  if (flow) return { prefix, contextId, flowId: Number(flow[1]), origin };
  const job = /^job:(\d+):(\d+)$/.exec(member);
  return job ? { prefix, contextId, flowId: 0, job: { callerId: Number(job[1]), id: Number(job[2]) }, origin } : null;
}

/**
 * The supervisor's sweep (cron, every minute): the backstop behind each flow's alarm. It reads
 * one sorted set of contexts that have something due; when nothing is due that one command is
 * all it costs. For a due context it relays what was left in msg_out, pokes every flow whose
 * check time passed (the flow's Durable Object acts on its own deadlines), and reschedules the
 * context. Overlapping sweeps are harmless: taking from msg_out is atomic and pokes are idempotent.
 */
export async function sweep(env: Env, now = Date.now()): Promise<SweepReport> {
  const store = storeFor(env);
  const due = await callRedis(() =>
    store.redis.exec<string[]>(["ZRANGEBYSCORE", store.keys.sweepDue(), "-inf", String(now), "LIMIT", "0", String(CONTEXTS_PER_SWEEP)]),
  );
  const report: SweepReport = { contexts: due.length, relayed: 0, poked: 0 };
  for (const contextId of due.map(Number)) {
    const { relayed, poked } = await sweepContext(env, store, contextId, now);
    report.relayed += relayed;
    report.poked += poked;
  }
  return report;
}

async function sweepContext(env: Env, store: Store, contextId: number, now: number): Promise<{ relayed: number; poked: number }> {
  const origin = env.PUBLIC_URL?.replace(/\/+$/, "") ?? "";
  const like: FlowScope = { prefix: store.keys.prefix, contextId, flowId: 0, origin };
  const owners = new MessageOwners(env, like, undefined);
  const moved = await relay(
    {
      store,
      key: (await coordinatorKeys(env)).current,
      runners: async (ctx) => (await store.runners.list({ context_id: ctx }, 0, 500)).items,
      owner: (message) => owners.for(message),
    },
    contextId,
    100,
  );
  const members = await callRedis(() =>
    store.redis.exec<string[]>(["ZRANGEBYSCORE", store.keys.deadlines(contextId), "-inf", String(now), "LIMIT", "0", String(FLOWS_PER_CONTEXT)]),
  );
  for (const member of members) {
    const scope = scopeOf(member, store.keys.prefix, contextId, origin);
    if (!scope) continue;
    const stub = env.FLOW_COORDINATOR.get(env.FLOW_COORDINATOR.idFromName(coordinatorName(scope)));
    unwrap(await stub.tick(scope));
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
  return { relayed: moved.delivered + moved.queued, poked: members.length };
}
