import { UNALLOCATED, type FlowEvent, type Transition } from "../../shared/flow/index.js";
import type { Queued } from "./batch.js";

/**
 * Reports that add jobs, kept in the object's storage from their arrival until the machine took
 * them, by job and attempt. Such a report needs storage before it can join a batch (growth.ts:
 * the context's permissions, ids for the new jobs); with storage away then, it would be lost
 * where nobody sends it again: a delivery's answer (the runner has had its 200) or a webhook whose
 * runner gave up. Kept, the alarm takes it again soon (through the same path: a repeat is a
 * duplicate to the machine, and at worst wastes the ids allocated for it).
 */
const OWED = "owed-report:";

/** A report kept: the event, its log lines, and how often the alarm took it again. */
interface Owed {
  event: FlowEvent;
  logs?: Queued["logs"];
  tries: number;
}

/** After this many tries by the alarm (minutes of storage away), a report is dropped, said in the log. */
const MOST_TRIES = 100;

/** What keeping reports needs of the object. */
export interface OwedReportsHost {
  readonly storage: DurableObjectStorage;
  /** Takes a report that adds jobs: prepared (storage calls) and applied in a batch. */
  report(event: FlowEvent, logs?: Queued["logs"], tries?: number): Promise<Transition>;
  /** Has the alarm come back soon (something is owed). */
  retrySoon(): Promise<void>;
}

export class OwedReports {
  /** Reports this object knows to be owed (in its storage), not taken yet. */
  private readonly owed = new Set<string>();

  constructor(private readonly host: OwedReportsHost) {}

  /**
   * Takes a report that adds jobs (`take` prepares and applies it), kept as owed from before it
   * is prepared until the machine judged it: taken, or refused for a reason a retry does not
   * change. A failure (storage away) leaves it owed and the alarm soon.
   */
  async keep(
    event: FlowEvent,
    logs: Queued["logs"] | undefined,
    take: () => Promise<Transition>,
    tries = 0,
  ): Promise<Transition> {
    const key = owedKey(event);
    this.owed.add(key);
    const kept = this.host.storage.put<Owed>(key, { event, ...(logs ? { logs } : {}), tries });
    try {
      const [, taken] = await Promise.all([kept, take()]);
      if (taken.outcome === "not-applicable" && taken.reason === UNALLOCATED) throw new Error(taken.reason);
      await this.host.storage.delete(key);
      this.owed.delete(key);
      return taken;
    } catch (error) {
      await this.host.retrySoon().catch(() => undefined);
      throw error;
    }
  }

  /** Whether a report is owed that was not taken yet: the alarm should come back soon. */
  owing(): boolean {
    return this.owed.size > 0;
  }

  /** The alarm's turn: each owed report taken again. True when none is left owed. */
  async retry(): Promise<boolean> {
    const owed = await this.host.storage.list<Owed>({ prefix: OWED });
    for (const [key, { event, logs, tries }] of owed) {
      if (tries >= MOST_TRIES) {
        console.warn(
          `flow report of job ${jobOf(event)} dropped after ${tries} tries: ${JSON.stringify(event).slice(0, 200)}`,
        );
        await this.host.storage.delete(key);
        this.owed.delete(key);
        continue;
      }
      await this.host.report(event, logs, tries + 1).catch(() => undefined);
    }
    return (await this.host.storage.list({ prefix: OWED, limit: 1 })).size === 0;
  }
}

function jobOf(event: FlowEvent): number {
  return "job" in event ? event.job : 0;
}

function owedKey(event: FlowEvent): string {
  return `${OWED}${jobOf(event)}:${"attempt" in event ? event.attempt : 0}`;
}
