import type { Store } from "../../shared/store/index.js";
import { publicOrigin } from "../core/config.js";
import type { Env } from "../core/env.js";
import { unwrap } from "../core/problem.js";
import { scopeFor, type ScopeBase } from "../core/scopes.js";
import { storeFor } from "../core/store.js";
import { coordinatorStub, wakeDispatcher } from "../core/stubs.js";

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
 * The supervisor's sweep (cron, every minute): the backstop behind each flow's alarm and each
 * context's dispatcher. It reads one sorted set of contexts that have something due; when
 * nothing is due that one command is all it costs. For a due context it wakes the context's
 * dispatcher (which also looks for claims left unsettled), pokes every flow whose check time
 * passed (the flow's Durable Object settles what it left pending and acts on its deadlines),
 * and reschedules the context. Overlapping sweeps are harmless: wakes and pokes are idempotent.
 */
export async function sweep(env: Env, now = Date.now()): Promise<SweepReport> {
  const store = storeFor(env);
  const due = await store.sweep.dueContexts(now, CONTEXTS_PER_SWEEP);
  const report: SweepReport = { contexts: due.length, poked: 0, failed: 0 };
  for (const contextId of due) {
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
  const owners = await store.sweep.dueOwners(contextId, now, FLOWS_PER_CONTEXT);
  for (const owner of owners) {
    const scope = scopeFor(base, contextId, owner);
    unwrap(await coordinatorStub(env, scope).tick(scope));
  }
  const checks = await store.sweep.checks(contextId);
  // Due again at the nearest of: a flow's check time, leftovers in msg_out, a delivery to settle.
  const next = Math.min(
    checks.firstCheck ?? Infinity,
    checks.waitingMail > 0 ? now + MSG_OUT_RECHECK_MS : Infinity,
    checks.firstInFlight !== undefined ? checks.firstInFlight + 1_000 : Infinity,
  );
  await store.sweep.reschedule(contextId, Number.isFinite(next) ? Math.max(next, now + 1000) : undefined);
  return owners.length;
}
