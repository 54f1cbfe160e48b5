import { Cron } from "croner";
import type { ScheduleCatchup } from "./schedule.js";

/*
 * When a schedule fires (docs/schedules.md): pure functions of the schedule's spec and the clock,
 * shared by the API (which validates cron expressions) and the Scheduler objects (which act on
 * them). Every fire time is derived from the spec alone (the cron expression, or the interval's
 * anchor), never from when an alarm actually rang, so a late alarm does not move later fires.
 */

/** How every cron expression is read: 5 fields (minute precision) or 6 (seconds first); day-of-month OR day-of-week, as Vixie cron. */
const CRON_OPTIONS = { mode: "5-or-6-parts" } as const;

/**
 * How late the newest due fire may be and still count as on time (started as the schedule's own
 * fire, not as a missed one the catch-up policy decides on). Longer than the sweep backstop's
 * delay (a minute of grace plus a minute between sweeps), so an alarm that did not ring and was
 * made up for by the sweep still runs.
 */
export const ON_TIME_MS = 5 * 60_000;

/** How many missed fires are counted one by one; beyond it a catch-up says "at least". */
export const MAX_SCAN = 10_000;

/** When a schedule fires: a cron expression in a time zone, or every `interval_seconds` from `anchor_ms`. */
export interface FireSpec {
  cron?: string | undefined;
  timezone?: string | undefined;
  interval_seconds?: number | undefined;
  anchor_ms: number;
}

/** Why a cron expression does not parse (the parser's words), or undefined when it does. */
export function cronProblem(expression: string): string | undefined {
  try {
    new Cron(expression, CRON_OPTIONS);
    return undefined;
  } catch (error) {
    return (error as Error).message.replace(/^CronPattern: /, "");
  }
}

function cronOf(spec: FireSpec & { cron: string }): Cron {
  return new Cron(spec.cron, { ...CRON_OPTIONS, timezone: spec.timezone ?? "UTC" });
}

/** The first fire strictly after `afterMs` (epoch ms, whole seconds); undefined when there is none (a cron that never matches again). */
export function nextFireAfter(spec: FireSpec, afterMs: number): number | undefined {
  if (spec.cron !== undefined)
    return cronOf({ ...spec, cron: spec.cron })
      .nextRun(new Date(afterMs))
      ?.getTime();
  const step = (spec.interval_seconds ?? 0) * 1000;
  if (step <= 0) return undefined;
  if (afterMs < spec.anchor_ms) return spec.anchor_ms + step;
  return spec.anchor_ms + (Math.floor((afterMs - spec.anchor_ms) / step) + 1) * step;
}

/**
 * The fires in (`fromMs`, `toMs`]: how many (counted up to MAX_SCAN) and the newest `keep` of
 * them, oldest first.
 */
export function firesBetween(
  spec: FireSpec,
  fromMs: number,
  toMs: number,
  keep: number,
): { count: number; newest: number[] } {
  if (spec.cron === undefined) {
    const step = (spec.interval_seconds ?? 0) * 1000;
    const first = nextFireAfter(spec, fromMs);
    if (first === undefined || first > toMs) return { count: 0, newest: [] };
    const count = Math.floor((toMs - first) / step) + 1;
    const taken = Math.min(keep, count);
    const last = first + (count - 1) * step;
    return { count, newest: Array.from({ length: taken }, (_, i) => last - (taken - 1 - i) * step) };
  }
  const cron = cronOf({ ...spec, cron: spec.cron });
  const newest: number[] = [];
  let count = 0;
  for (let at = cron.nextRun(new Date(fromMs)); at && at.getTime() <= toMs; at = cron.nextRun(at)) {
    count++;
    newest.push(at.getTime());
    if (newest.length > keep) newest.shift();
    if (count >= MAX_SCAN) {
      // Too many to walk: the newest ones are read backwards from the end instead.
      const back = keep > 0 ? cron.previousRuns(keep, new Date(toMs + 1)).map((d) => d.getTime()) : [];
      return { count, newest: back.filter((t) => t > fromMs).reverse() };
    }
  }
  return { count, newest };
}

/** What an alarm at `now` owes: the fire that is on time, the missed fires to run, and how many are skipped. */
export interface DuePlan {
  /** The newest due fire, when it is at most ON_TIME_MS late. */
  current?: number;
  /** Missed fires the catch-up policy runs, oldest first. */
  catchup: number[];
  /** Missed fires dropped (the catch-up policy skips them, or they are past its `max`), and their span. */
  skipped: number;
  skippedFrom?: number;
  skippedTo?: number;
  /** The newest due fire: the next plan starts after it. */
  latest?: number;
}

/**
 * The fires due in (`sinceMs`, `now`] and what to do with each: the newest one runs if it is on
 * time; the others were missed (the coordinator was away) and are run, the newest `max` of them,
 * or skipped, as `catchup` says.
 */
export function planDue(spec: FireSpec, sinceMs: number, now: number, catchup: ScheduleCatchup): DuePlan {
  const { count, newest } = firesBetween(spec, sinceMs, now, catchup.max + 1);
  if (count === 0) return { catchup: [], skipped: 0 };
  const latest = newest[newest.length - 1] as number;
  const onTime = now - latest <= ON_TIME_MS;
  const missed = onTime ? newest.slice(0, -1) : newest;
  const missedCount = onTime ? count - 1 : count;
  const run = catchup.policy === "run" ? missed.slice(-catchup.max) : [];
  const skipped = missedCount - run.length;
  const plan: DuePlan = { catchup: run, skipped, latest };
  if (onTime) plan.current = latest;
  if (skipped > 0) {
    // The skipped span: from the first missed fire to the one before the first that runs.
    const first = nextFireAfter(spec, sinceMs) as number;
    plan.skippedFrom = first;
    plan.skippedTo = run.length > 0 ? lastBefore(spec, run[0] as number, first) : (missed[missed.length - 1] ?? first);
  }
  return plan;
}

/** The newest fire before `at` that is not before `floor`. */
function lastBefore(spec: FireSpec, at: number, floor: number): number {
  if (spec.cron === undefined) return Math.max(floor, at - (spec.interval_seconds ?? 0) * 1000);
  const before = cronOf({ ...spec, cron: spec.cron })
    .previousRuns(1, new Date(at))[0]
    ?.getTime();
  return before === undefined ? floor : Math.max(floor, before);
}
