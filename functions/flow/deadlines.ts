import {
  changedJobs,
  deadlineEvent,
  dueDeadlines,
  flowDeadline,
  type FlowEvent,
  type FlowState,
  type Transition,
} from "../../shared/flow/index.js";

/** The object's storage key of when storage went away (durable: the object may be evicted meanwhile). */
const DOWN_SINCE = "storage-down-since";
/** The object's storage key of when a call first came back from that outage, before it was charged. */
const UP_AT = "storage-up-at";

/** How soon an object that could not act (storage away, a plan pending) tries again. */
export const RETRY_SOON_MS = 5_000;

/**
 * The flow's deadlines by time, kept up to date batch by batch: a min-heap of (time, job) whose
 * stale entries (a job whose deadline moved or went) are dropped when they come to the top.
 * Finding the nearest deadline by reading every job after every batch cost a 1,000-job flow as
 * much as its journal did.
 */
class DeadlineIndex {
  /** The state the index was built from or brought up to. */
  private state: FlowState | undefined;
  private current = new Map<number, number>();
  private heap: [at: number, job: number][] = [];

  /** The nearest deadline of `state`; `before`, when given, is the state `state` was reached from. */
  nearest(state: FlowState, before?: FlowState): number | undefined {
    if (before !== undefined && before === this.state) {
      for (const id of changedJobs(before, state)) this.set(id, state.jobs.job(id).deadline?.at);
    } else {
      this.current = new Map();
      this.heap = [];
      for (const id of state.order) this.set(id, state.jobs.job(id).deadline?.at);
    }
    this.state = state;
    for (;;) {
      const top = this.heap[0];
      if (!top || this.current.get(top[1]) === top[0]) return top?.[0];
      this.pop();
    }
  }

  private set(job: number, at: number | undefined): void {
    if (this.current.get(job) === at) return;
    if (at === undefined) {
      this.current.delete(job);
      return;
    }
    this.current.set(job, at);
    const heap = this.heap;
    heap.push([at, job]);
    for (let i = heap.length - 1; i > 0;) {
      const parent = (i - 1) >> 1;
      if ((heap[parent] as [number, number])[0] <= at) break;
      [heap[i], heap[parent]] = [heap[parent] as [number, number], heap[i] as [number, number]];
      i = parent;
    }
  }

  private pop(): void {
    const heap = this.heap;
    const last = heap.pop();
    if (heap.length === 0 || !last) return;
    heap[0] = last;
    for (let i = 0; ;) {
      const l = 2 * i + 1;
      const r = l + 1;
      let min = i;
      if (l < heap.length && (heap[l] as [number, number])[0] < (heap[min] as [number, number])[0]) min = l;
      if (r < heap.length && (heap[r] as [number, number])[0] < (heap[min] as [number, number])[0]) min = r;
      if (min === i) return;
      [heap[i], heap[min]] = [heap[min] as [number, number], heap[i] as [number, number]];
      i = min;
    }
  }
}

/** What acting on deadlines needs from the object around it. */
export interface DeadlineHost {
  readonly storage: DurableObjectStorage;
  enqueue(event: FlowEvent): Promise<Transition>;
  /** Whether the context's dispatch is paused. A read of storage: it also proves storage is there. */
  isPaused(): Promise<boolean>;
  /** Why nothing took a job's attempt (for the error of a missed delivery deadline). */
  whyUndelivered(state: FlowState, job: number): Promise<string | undefined>;
  /** A map waits to expand: its instances' ids are allocated and `expanded` sent (growth.ts). */
  expand(job: number): Promise<void>;
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
  /**
   * When a call first came back from the marked outage while no state was in memory to move (it
   * is read back after an unknown outcome); null: none did; undefined: not read yet. Durable as
   * the mark is: the outage ended then, not when the move is made, which may be long after.
   */
  private upAt: number | null | undefined;
  private reading: Promise<void> | undefined;
  private readonly index = new DeadlineIndex();
  /** The alarm this object set (null: none); undefined when not known (at first, or once it rang). */
  private armed: number | null | undefined;
  /** The alarm was set by `armBy` for work claimed and not delivered, and by nothing else since. */
  private forClaims = false;

  constructor(private readonly host: DeadlineHost) {}

  /**
   * Reads the outage mark once. Calls that overlap share the read, and each decides on the mark
   * without awaiting after it, so two of them never both claim one outage.
   */
  private async readMark(): Promise<void> {
    if (this.downSince !== undefined) return;
    this.reading ??= this.host.storage.get<number>([DOWN_SINCE, UP_AT]).then((marks) => {
      if (this.downSince !== undefined) return;
      this.downSince = marks.get(DOWN_SINCE) ?? null;
      this.upAt = marks.get(UP_AT) ?? null;
    });
    await this.reading;
  }

  /** A storage call had no known outcome. */
  async storageDown(now = Date.now()): Promise<void> {
    await this.readMark();
    if (this.downSince !== null) {
      // Away again before the outage was charged: one outage, from the first one's start.
      if (this.upAt === null) return;
      this.upAt = null;
      await this.host.storage.delete(UP_AT);
      return;
    }
    this.downSince = now;
    await this.host.storage.put(DOWN_SINCE, now);
  }

  /**
   * A storage call came back. Resolves with how long storage was away (0 if it was not), once
   * the deadlines were moved by that much; `state` undefined means there is none to move yet.
   * The mark stays until the move is applied: should it fail, the next call that comes back
   * tries again, from the earliest start of the outage.
   *
   * The outage ends at the first call that came back, even one made with no state in memory
   * (settling a pending plan, reading the state back): that time is kept (`upAt`), since the
   * move may come much later (the next commit, or a deadline coming due, in this object or a
   * fresh one), and measured up to then it moved a flow's only wait by the whole time from the
   * outage to its timeout (the chaos soak's seed 29112611: 23.5 s past due).
   */
  async storageUp(state: FlowState | null | undefined, now = Date.now()): Promise<number> {
    await this.readMark();
    const since = this.downSince;
    if (since === null || since === undefined) return 0;
    if (!state) {
      if (this.upAt !== null && this.upAt !== undefined) return 0;
      this.upAt = now;
      await this.host.storage.put(UP_AT, now);
      return 0;
    }
    const upAt = this.upAt ?? null;
    this.downSince = null; // this call owns the outage now
    this.upAt = null;
    const downFor = Math.max(0, (upAt ?? now) - since);
    try {
      if (downFor > 0) await this.host.enqueue({ type: "resumed", downFor, at: now, until: upAt ?? now });
    } catch (error) {
      // The move failed: storage is away again, one outage from the earliest start.
      this.downSince = Math.min(since, this.downSince ?? Infinity);
      await this.host.storage.put(DOWN_SINCE, this.downSince);
      if (upAt !== null && this.upAt === null) await this.host.storage.delete(UP_AT);
      throw error;
    }
    // A new outage may have begun meanwhile: its mark stays (and its own return, if one came).
    if (this.downSince === null) await this.host.storage.delete([DOWN_SINCE, UP_AT]);
    else if (upAt !== null && this.upAt === null) await this.host.storage.delete(UP_AT);
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
        if (d.kind === "expand") {
          await this.host.expand(d.job);
          continue;
        }
        const why = d.kind === "delivery" ? await this.host.whyUndelivered(state, d.job) : undefined;
        await this.host.enqueue(deadlineEvent(state, d, now, paused, Math.random(), why));
      } catch {
        reached = false; // storage away: the alarm tries again shortly
      }
    }
    return reached;
  }

  /**
   * Sets the alarm to the nearest deadline, or soon when something must be tried again, and never
   * later than `by` when given (work claimed and not delivered yet). `before` is the state a batch
   * reached `state` from, when this is a commit's arming: the nearest deadline then follows from
   * the jobs the batch changed. An alarm already where it should be is left alone (setting it is
   * a storage write).
   */
  async arm(
    state: FlowState | null | undefined,
    retrySoon: boolean,
    now = Date.now(),
    before?: FlowState,
    by?: number,
  ): Promise<void> {
    const due = state ? this.index.nearest(state, before) : undefined;
    // The flow's own deadline (timeouts.flow) belongs to no job: the index does not hold it.
    const flowDue = state && state.endedAt === undefined ? flowDeadline(state) : undefined;
    const times = [due, flowDue, retrySoon ? now + RETRY_SOON_MS : undefined, by].filter(
      (t): t is number => t !== undefined,
    );
    const target = times.length === 0 ? null : Math.min(...times);
    if (target === this.armed) return;
    // While work is claimed and not delivered, an alarm that comes by then already does: moving it
    // would be another write for the delivery to wait on.
    if (
      by !== undefined &&
      target !== null &&
      typeof this.armed === "number" &&
      this.armed <= target &&
      this.armed > now
    )
      return;
    this.armed = undefined;
    this.forClaims = false;
    if (target === null) await this.host.storage.deleteAlarm();
    else await this.host.storage.setAlarm(target);
    this.armed = target;
  }

  /** Has the alarm ring by `at` at the latest, for work claimed and not delivered yet (an earlier one is left). */
  async armBy(at: number): Promise<void> {
    if (this.armed !== undefined && this.armed !== null && this.armed <= at) return;
    this.armed = undefined;
    await this.host.storage.setAlarm(at);
    this.armed = at;
    this.forClaims = true;
  }

  /**
   * Every claim was delivered: an alarm set for them alone goes back to the nearest deadline (or
   * away), so that a flow at rest (or ended) is not woken for nothing, which after an eviction
   * would cost it a read of all its records.
   */
  async claimsDelivered(state: FlowState | null | undefined): Promise<void> {
    if (this.forClaims) await this.arm(state, false);
  }

  /** Storage was wiped (alarm and outage mark with it): nothing of it is known any more, and no alarm is set. */
  forget(): void {
    this.downSince = undefined;
    this.upAt = undefined;
    this.reading = undefined;
    this.armed = null;
    this.forClaims = false;
  }

  /** The alarm rang (or is about to be cleared elsewhere): what is set is not known any more. */
  rang(): void {
    this.armed = undefined;
    this.forClaims = false;
  }

  /** The flow is gone: no alarm. */
  async disarm(): Promise<void> {
    this.armed = undefined;
    await this.host.storage.deleteAlarm();
    this.armed = null;
  }
}
