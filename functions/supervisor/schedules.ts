import type { Store } from "../../shared/store/index.js";
import { publicOrigin } from "../core/config.js";
import type { Env } from "../core/env.js";
import { unwrap } from "../core/problem.js";
import { schedulerStub } from "../core/stubs.js";

/** How late a schedule's fire must be before the sweep pokes its object: its own alarm acts first. */
export const SCHEDULE_GRACE_MS = 60_000;
const SCHEDULES_PER_SWEEP = 100;

/**
 * The backstop of recurring flows (docs/schedules.md): pokes the Scheduler of every schedule
 * whose next fire passed more than SCHEDULE_GRACE_MS ago (its alarm did not ring, or its fire
 * could not be acted on). One command when none is late. A poke runs the same plan as the alarm
 * (one at a time inside the object), so a poke racing the alarm starts nothing twice. Objects
 * that cannot be reached stay due and are poked again next minute. Resolves with the counts.
 */
export async function pokeLateSchedules(
  env: Env,
  store: Store,
  now: number,
): Promise<{ poked: number; failed: number }> {
  const report = { poked: 0, failed: 0 };
  const late = await store.schedules.due(now - SCHEDULE_GRACE_MS, SCHEDULES_PER_SWEEP);
  const origin = publicOrigin(env);
  for (const { contextId, scheduleId } of late) {
    // The object keeps the origin it was created with; this one only stands in for a fresh object.
    const scope = { prefix: store.keys.prefix, contextId, scheduleId, origin };
    try {
      unwrap(await schedulerStub(env, scope).poke(scope));
      report.poked++;
    } catch (error) {
      report.failed++;
      console.warn(`sweep: schedule ${contextId}/${scheduleId}: ${(error as Error).message}`);
    }
  }
  if (late.length > 0) console.log(`sweep: late schedules poked=${report.poked} failed=${report.failed}`);
  return report;
}
