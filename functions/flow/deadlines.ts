import {
  deadlineEvent,
  dueDeadlines,
  nearestDeadline,
  type FlowEvent,
  type FlowState,
  type Transition,
} from "../../shared/flow/index.js";

/** The object's storage key of when storage went away (durable: the object may be evicted meanwhile). */
const DOWN_SINCE = "storage-down-since";

/** How soon an object that could not act (storage away, a plan pending) tries again. */
export const RETRY_SOON_MS = 5_000;

/** What acting on deadlines needs from the object around it. */
export interface DeadlineHost {
  readonly storage: DurableObjectStorage;
  enqueue(event: FlowEvent): Promise<Transition>;
  /** Whether the context's dispatch is paused. A read of storage: it also proves storage is there. */
  isPaused(): Promise<boolean>;
  /** Why nothing took a job's attempt (for the error of a missed delivery deadline). */
  whyUndelivered(state: FlowState, job: number): Promise<string | undefined>;
}

/**
 * The flow's timers: its alarm rings at the nearest deadline, and a missed deadline fails the
 * attempt (or, for a retry's backoff, dispatches the next one).
 *
 * Time the coordinator could not act is not charged to runners: a storage call without a known
 * outcome marks storage down (durably, since the object may be evicted meanwhile), and the first
 * call that comes back moves every pending delivery, acknowledgement and result deadline later
 * by the time storage was away. So a runner whose report failed during an outage, and who
 * retries it when storage is back, finds its attempt still its own and not re-run. Before a due
 * deadline fails an attempt, storage is read once: a deadline is never acted on while storage is
 * away, and one that came due during an outage is moved before it is acted on.
 */
export class Deadlines {
  /** When storage went away; null: it is up; undefined: not read from storage yet. */
  private downSince: number | null | undefined;
  private reading: Promise<void> | undefined;

  constructor(private readonly host: DeadlineHost) {}

  /**
   * Reads the outage mark once. Calls that overlap share the read, and each decides on the mark
   * without awaiting after it, so two of them never both claim one outage.
   */
  private async readMark(): Promise<void> {
    if (this.downSince !== undefined) return;
    this.reading ??= this.host.storage.get<number>(DOWN_SINCE).then((at) => {
      this.downSince ??= at ?? null;
    });
    await this.reading;
  }

  /** A storage call had no known outcome. */
  async storageDown(now = Date.now()): Promise<void> {
    await this.readMark();
    if (this.downSince !== null) return;
    this.downSince = now;
    await this.host.storage.put(DOWN_SINCE, now);
  }

  /**
   * A storage call came back. Resolves with how long storage was away (0 if it was not), once
   * the deadlines were moved by that much; `state` undefined means there is none to move yet.
   * The mark stays until the move is applied: should it fail, the next call that comes back
   * tries again, from the earliest start of the outage.
   */
  async storageUp(state: FlowState | null | undefined, now = Date.now()): Promise<number> {
    await this.readMark();
    const since = this.downSince;
    if (since === null || since === undefined || !state) return 0;
    this.downSince = null; // this call owns the outage now
    const downFor = Math.max(0, now - since);
    try {
      if (downFor > 0) await this.host.enqueue({ type: "resumed", downFor, at: now });
    } catch (error) {
      this.downSince = Math.min(since, this.downSince ?? Infinity);
      await this.host.storage.put(DOWN_SINCE, this.downSince);
      throw error;
    }
    // A new outage may have begun meanwhile: its mark stays.
    if (this.downSince === null) await this.host.storage.delete(DOWN_SINCE);
    return downFor;
  }

  /** Acts on every deadline that has passed; true if storage could be reached for it. */
  async actOnDue(state: FlowState, now = Date.now()): Promise<boolean> {
    const due = dueDeadlines(state, now);
    if (due.length === 0) return true;
    let paused: boolean;
    try {
      paused = await this.host.isPaused();
    } catch {
      await this.storageDown(now);
      return false;
    }
    // Storage answered: an outage that just ended moves the deadlines before any is judged.
    if ((await this.storageUp(state, now)) > 0) return true;
    let reached = true;
    for (const d of due) {
      try {
        const why = d.kind === "delivery" ? await this.host.whyUndelivered(state, d.job) : undefined;
        await this.host.enqueue(deadlineEvent(state, d, now, paused, Math.random(), why));
      } catch {
        reached = false; // storage away: the alarm tries again shortly
      }
    }
    return reached;
  }

  /** Sets the alarm to the nearest deadline, or soon when something must be tried again. */
  async arm(state: FlowState | null | undefined, retrySoon: boolean, now = Date.now()): Promise<void> {
    const due = state ? nearestDeadline(state)?.at : undefined;
    const times = [due, retrySoon ? now + RETRY_SOON_MS : undefined].filter((t): t is number => t !== undefined);
    if (times.length === 0) await this.host.storage.deleteAlarm();
    else await this.host.storage.setAlarm(Math.min(...times));
  }
}
