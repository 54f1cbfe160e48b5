import type { FlowEvent, FlowState, Transition } from "../../shared/flow/index.js";
import type { Store } from "../../shared/store/index.js";
import type { FlowScope } from "../core/scopes.js";

/** What looking back for kept events needs of the flow's object (FlowObject implements it). */
export interface KeptEventsHost {
  scope(): FlowScope;
  store(): Store;
  current(): FlowState | null | undefined;
  enqueue(event: FlowEvent): Promise<Transition>;
}

/**
 * A wait that starts takes an event its context kept for it (`event_lookback`): once its start
 * is durable (the commit put it in the index of waits, so an event sent from then on finds it),
 * the events kept for its name and key are read once, and the earliest still kept is offered to
 * it. Whichever reaches the wait first, that event or one sent after it started, ends it; the
 * other changes nothing. A read that fails is tried again by the object's alarm, set soon for it,
 * and every running wait is looked at again when the object is rebuilt (memory of what is
 * pending is lost with it), before the wake acts on due deadlines: a wait's timeout does not
 * win over an event that was kept for it before.
 */
export class KeptEvents {
  /** Waits (job ids) whose look back is still owed. */
  private readonly owed = new Set<number>();

  constructor(private readonly host: KeptEventsHost) {}

  /** Waits started by a durable batch: each looks back now; false when a read failed (look back again soon). */
  async started(jobs: number[]): Promise<boolean> {
    if (jobs.length === 0) return true;
    for (const job of jobs) this.owed.add(job);
    return this.lookBack().catch(() => false);
  }

  /** The flow was read back from storage: every running wait looks back again. */
  reloaded(state: FlowState): void {
    for (const id of state.order) if (state.jobs.job(id).deadline?.kind === "wait") this.owed.add(id);
  }

  /** Looks back for each owed wait; false when a read failed (the alarm should come back soon). */
  async lookBack(): Promise<boolean> {
    let done = true;
    for (const id of [...this.owed]) {
      const state = this.host.current();
      const job = state?.jobs.get(id);
      const name = job?.spec.wait?.event;
      if (!state || !job || name === undefined || job.deadline?.kind !== "wait" || job.waitKey === undefined) {
        this.owed.delete(id);
        continue;
      }
      try {
        const now = Date.now();
        const kept = await this.host.store().events.kept(state.contextId, name, job.waitKey, now);
        if (kept) {
          const event = { type: "event" as const, job: id, id: kept.id, name, key: job.waitKey, data: kept.data };
          await this.host.enqueue({ ...event, at: now });
        }
        this.owed.delete(id);
      } catch {
        done = false;
      }
    }
    return done;
  }

  forget(): void {
    this.owed.clear();
  }
}
