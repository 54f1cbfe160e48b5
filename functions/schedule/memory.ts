import { RECENT_RUNS, type ScheduleRun } from "../../shared/model/index.js";
import type { SchedulerState } from "../core/contracts.js";

/** One fire: its time (epoch ms, whole seconds) and what caused it. */
export interface Fire {
  at: number;
  trigger: ScheduleRun["trigger"];
}

/**
 * What a Scheduler keeps in its storage (one key, `state`, written whole, so each change is one
 * atomic put). Redis holds the schedule's definition; this holds what happened.
 */
export interface Memory {
  /** The newest scheduled fire planned: a scheduled fire at or before it is never planned again. */
  lastMs?: number;
  /** When the alarm is set to fire next (a scheduled fire); undefined while paused. */
  nextMs?: number;
  /** Fires decided on and not acted on yet: written before acting, so one lost with the isolate is acted on again. */
  pending: Fire[];
  /** The one fire waiting for the running flows to end (overlap `buffer_one`). */
  buffered?: Fire;
  /** Flows this schedule started that were still running when last looked at. */
  running: number[];
  /** Recent runs, newest first. */
  runs: ScheduleRun[];
  /** Whether the record was paused when last read: a resume plans from its own time, not from before the pause. */
  paused?: boolean;
  /** Storage or an object failed this many times in a row while acting (the retry backs off). */
  failures?: number;
  /**
   * The incarnation token of the schedule this memory is of (its record's `_op`): a record under
   * the same id with another token is another schedule, whose memory starts empty.
   */
  incarnation?: string;
}

/** A fresh memory. */
export function emptyMemory(): Memory {
  return { pending: [], running: [], runs: [] };
}

/** Epoch seconds of an epoch-ms time. */
export const seconds = (ms: number): number => Math.floor(ms / 1000);

/** Adds a run at the front of the recent runs, keeping RECENT_RUNS. */
export function remember(memory: Memory, run: ScheduleRun): void {
  memory.runs = [run, ...memory.runs].slice(0, RECENT_RUNS);
}

/**
 * The run already recorded for this fire, if any (a fire that was acted on and is asked for
 * again: a repeated trigger in the same second). A `buffered` record does not count: the fire
 * still waits.
 */
export function recorded(memory: Memory, fire: Fire): ScheduleRun | undefined {
  return memory.runs.find((r) => r.fire_at === seconds(fire.at) && r.outcome !== "buffered");
}

/** What the object tells the API. */
export function stateOf(memory: Memory): SchedulerState {
  // The last fire, scheduled or triggered by hand, whatever became of it (acted on, or planned and
  // waiting to be). Not `lastMs`: that is where planning resumes, which a resume moves to its own
  // time though nothing fired then.
  const last = Math.max(...memory.runs.map((r) => r.fire_at), ...memory.pending.map((f) => seconds(f.at)), -1);
  return {
    ...(last >= 0 ? { last_fire_at: last } : {}),
    ...(memory.nextMs !== undefined ? { next_fire_at: seconds(memory.nextMs) } : {}),
    ...(memory.buffered ? { buffered_fire_at: seconds(memory.buffered.at) } : {}),
    running_flow_ids: memory.running,
    recent_runs: memory.runs,
  };
}
