import type { Store } from "../../shared/store/index.js";
import { publicOrigin } from "../core/config.js";
import type { Env } from "../core/env.js";
import { storeFor } from "../core/store.js";
import { dispatcherStub } from "../core/stubs.js";
import { pokeLateSchedules } from "./schedules.js";

/** What one cron run of the sweep did, for logs and tests. */
export interface SweepReport {
  /** Contexts handed to their dispatchers, each of which sweeps its own. */
  contexts: number;
  /** Hand-offs that failed: those contexts come back when their lease ends. */
  failed: number;
  /** Claims made (one script each). */
  pages: number;
  /** The run reached its bounds with contexts still due: the next run takes them. */
  left: boolean;
}

/** Contexts one claim takes, hand-offs under way at once. */
const PAGE = 200;
const HANDOFFS_AT_ONCE = 50;
/**
 * A run's bounds, within Cloudflare's for a cron invocation (docs/architecture.md, "The sweep"):
 * a hand-off is one subrequest, a claim one, so 5,000 contexts cost 5,026 of the 10,000 allowed
 * (with the first read; the late schedules' up to 101 and the count's one besides); and no page
 * is claimed after 40 s.
 */
const MOST_PER_RUN = 5_000;
const RUN_BUDGET_MS = 40_000;
/**
 * How far a claim pushes a context's due time: its dispatcher sets the real one when its sweep
 * ends, and one whose hand-off or sweep failed is due again before the next minute's run.
 */
export const SWEEP_LEASE_MS = 50_000;

/**
 * The supervisor's sweep (cron, every minute): the backstop behind each flow's alarm and each
 * context's dispatcher. It claims the contexts due in `sweep:due`, a page per script, and hands
 * each to its context's Dispatcher, which sweeps the context on its own alarm (context-sweep.ts):
 * the run's work is O(1) per due context and the contexts are swept in parallel, each by its own
 * object. Every context due when the run starts is handed over in the run, up to MOST_PER_RUN.
 * When nothing is due, a read of `sweep:due`, the late schedules' read and counting the run are
 * all it costs: three commands (none run inside a script). Overlapping runs are harmless: a
 * claimed context is not due to another.
 */
export async function sweep(env: Env, now = Date.now()): Promise<SweepReport> {
  const store = storeFor(env);
  const report: SweepReport = { contexts: 0, failed: 0, pages: 0, left: false };
  if (await store.sweep.anyDue(now)) await handOver(env, store, now, report);
  // Recurring flows whose alarm did not fire: poked here, once, however many contexts are due.
  await pokeLateSchedules(env, store, now).catch((error: unknown) => {
    console.warn(`sweep: schedules: ${(error as Error).message}`);
  });
  // The global sweep counters of /metrics. Storage away here: the sweep's work is done, only its count is lost.
  await store.metrics.countSweep(report).catch((error: unknown) => {
    console.warn(`sweep: counting: ${(error as Error).message}`);
  });
  return report;
}

/**
 * Claims the contexts due at `now` a page at a time and hands each page over, until none is left
 * or the run's bounds are reached.
 */
async function handOver(env: Env, store: Store, now: number, report: SweepReport): Promise<void> {
  for (;;) {
    const room = MOST_PER_RUN - report.contexts - report.failed;
    if (room <= 0 || Date.now() - now > RUN_BUDGET_MS) {
      report.left = true;
      return;
    }
    const limit = Math.min(PAGE, room);
    // Due at the run's start: a context its dispatcher made due again meanwhile waits for the next run.
    const page = await store.sweep.claim(now, Date.now() + SWEEP_LEASE_MS, limit);
    report.pages++;
    await handOff(env, store, page, report);
    if (page.length < limit) return;
  }
}

/**
 * Asks each context's Dispatcher for its sweep, HANDOFFS_AT_ONCE at a time. A call returns once
 * the ask is durable (the object's storage and alarm), not when the sweep is done.
 */
async function handOff(env: Env, store: Store, contexts: number[], report: SweepReport): Promise<void> {
  const base = { prefix: store.keys.prefix, origin: publicOrigin(env) };
  let next = 0;
  const handing = async () => {
    for (let i = next++; i < contexts.length; i = next++) {
      const scope = { ...base, contextId: contexts[i] as number };
      try {
        await dispatcherStub(env, scope).sweep(scope);
        report.contexts++;
      } catch (error) {
        // Its lease brings it back before the next run; the other contexts are handed meanwhile.
        report.failed++;
        console.warn(`sweep: context ${scope.contextId}: ${(error as Error).message}`);
      }
    }
  };
  await Promise.all(Array.from({ length: Math.min(HANDOFFS_AT_ONCE, contexts.length) }, handing));
}
