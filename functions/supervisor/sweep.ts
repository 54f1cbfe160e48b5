import type { ContextChecks, Store } from "../../shared/store/index.js";
import type { EffectiveRetention } from "../../shared/model/index.js";
import { publicOrigin, readConfig } from "../core/config.js";
import { deleteContextStep, DELETION_STEP_MS } from "../core/context-deletion.js";
import type { Env } from "../core/env.js";
import { unwrap } from "../core/problem.js";
import { parseRetention, retentionInForce, retentionStep } from "../core/retention.js";
import { scopeFor, type ScopeBase } from "../core/scopes.js";
import { storeFor } from "../core/store.js";
import { coordinatorStub, wakeDispatcher } from "../core/stubs.js";
import { pokeLateSchedules } from "./schedules.js";

/** What one sweep did, for logs and tests. */
export interface SweepReport {
  contexts: number;
  poked: number;
  /** Contexts (storage away: they stay due), dispatchers and flows that could not be reached this time. */
  failed: number;
  /** Ended flows (and jobs outside flows) removed by retention, and unread inbox messages past their window. */
  removed: number;
  expired: number;
  /** Contexts whose deletion went on (deleted ones included). */
  deleting: number;
}

const CONTEXTS_PER_SWEEP = 50;
const FLOWS_PER_CONTEXT = 100;
const MSG_OUT_RECHECK_MS = 30_000;

/**
 * The supervisor's sweep (cron, every minute): the backstop behind each flow's alarm and each
 * context's dispatcher. It reads one sorted set of contexts that have something due; when
 * nothing is due, that read, the late schedules' and counting the sweep (/metrics) are all it
 * costs: three commands. For a due context it wakes the context's dispatcher (which also looks
 * for claims left unsettled), pokes every flow whose check time passed (the flow's Durable
 * Object settles what it left pending and acts on its deadlines), and reschedules the context.
 * Overlapping sweeps are harmless: wakes and pokes are idempotent.
 */
export async function sweep(env: Env, now = Date.now()): Promise<SweepReport> {
  const store = storeFor(env);
  const due = await store.sweep.dueContexts(now, CONTEXTS_PER_SWEEP);
  const report: SweepReport = { contexts: due.length, poked: 0, failed: 0, removed: 0, expired: 0, deleting: 0 };
  for (const contextId of due) {
    try {
      await sweepContext(env, store, contextId, now, report);
    } catch (error) {
      // Storage away for this context: it stays due, the next sweep tries it again, and the
      // other contexts are swept meanwhile.
      report.failed++;
      console.warn(`sweep: context ${contextId}: ${(error as Error).message}`);
    }
  }
  // Recurring flows whose alarm did not fire: poked here, once, however many contexts are due.
  await pokeLateSchedules(env, store, now).catch((error: unknown) => {
    console.warn(`sweep: schedules: ${(error as Error).message}`);
  });
  // The global sweep counters of /metrics, and the swept contexts' figures folded (one HINCRBY
  // when idle). Storage away here: the sweep's work is done, only its count is lost.
  await store.metrics.countSweep(report, due).catch((error: unknown) => {
    console.warn(`sweep: counting: ${(error as Error).message}`);
  });
  return report;
}

/**
 * Sweeps one context: its dispatcher and each due flow are called on their own, so one that
 * cannot answer (or fails for good) holds up neither the others nor the context's next due time.
 * Throws only when storage itself is away; the context then stays due.
 */
async function sweepContext(
  env: Env,
  store: Store,
  contextId: number,
  now: number,
  report: SweepReport,
): Promise<void> {
  const base: ScopeBase = { prefix: store.keys.prefix, origin: publicOrigin(env) };
  const checks = await store.sweep.checks(contextId);
  if (checks.deletingSince !== undefined) {
    // A deletion under way goes on, a bounded step at a time, until nothing of the context is left.
    report.deleting++;
    if (!(await deleteContextStep(env, store, base, contextId, Date.now() + DELETION_STEP_MS)))
      await store.sweep.reschedule(contextId, now + 1000);
    return;
  }
  const attempt = async (what: string, call: () => Promise<unknown>) => {
    try {
      await call();
    } catch (error) {
      report.failed++;
      console.warn(`sweep: context ${contextId}, ${what}: ${(error as Error).message}`);
    }
  };
  await attempt("dispatcher", () =>
    // `runners` too: a runner change whose own wake failed left the sweep due (wakeContext).
    wakeDispatcher(env, { ...base, contextId }, { work: true, mail: true, reap: true, runners: true }),
  );
  for (const owner of await store.sweep.dueOwners(contextId, now, FLOWS_PER_CONTEXT)) {
    const scope = scopeFor(base, contextId, owner);
    await attempt(scope.job ? `job ${scope.job.id}` : `flow ${scope.flowId}`, async () => {
      unwrap(await coordinatorStub(env, scope).tick(scope));
      report.poked++;
    });
  }
  const policy = retentionInForce(readConfig(env), parseRetention(checks.retention));
  let more = false;
  if (retentionDue(checks, policy) <= now) {
    const step = await retentionStep(env, store, base, contextId, policy, now);
    report.removed += step.removed;
    report.expired += step.expired;
    report.failed += step.failed;
    more = step.more;
  }
  await store.sweep.reschedule(contextId, nextDue(await store.sweep.checks(contextId), policy, now, more));
  // A flow that started while this ran made the context due by its own deadline (ZADD LT), which
  // the write above may have overwritten: it always adds to the deadline set first, so a second
  // read sees it, and an earlier due time is put back.
  const latest = await store.sweep.checks(contextId);
  const again = nextDue(latest, policy, now, more);
  // A deletion begun while this ran must not lose its place: the write above may have removed it.
  if (latest.deletingSince !== undefined) await store.sweep.dueBy(contextId, now);
  else if (again !== undefined) await store.sweep.dueBy(contextId, again);
}

/** When retention next has something to remove in a context (epoch ms; Infinity: nothing). */
function retentionDue(checks: ContextChecks, policy: EffectiveRetention): number {
  const after = (at: number | undefined, seconds: number) => (at === undefined ? Infinity : at + seconds * 1000);
  return Math.min(
    after(checks.firstEnded.finished, policy.finished_seconds),
    after(checks.firstEnded.error, policy.error_seconds),
    after(checks.firstInbox, policy.inbox_seconds),
  );
}

/**
 * When a context is next due: the nearest of a flow's check time, leftovers in msg_out, a
 * delivery to settle, what retention removes next (at once when a step left more behind).
 */
function nextDue(checks: ContextChecks, policy: EffectiveRetention, now: number, more: boolean): number | undefined {
  const next = Math.min(
    checks.firstCheck ?? Infinity,
    checks.waitingMail > 0 ? now + MSG_OUT_RECHECK_MS : Infinity,
    checks.firstInFlight !== undefined ? checks.firstInFlight + 1_000 : Infinity,
    more ? now : retentionDue(checks, policy),
  );
  return Number.isFinite(next) ? Math.max(next, now + 1000) : undefined;
}
