import { dueDeadlines, type FlowState, type Journal } from "../../shared/flow/index.js";
import type { Store } from "../../shared/store/index.js";
import type { FlowBinding } from "./binding.js";
import type { RecordSeen } from "./record-seen.js";
import { wipeStorage } from "./reset.js";
import { readFlow, readRecordToken, rebuildFrom } from "./stored.js";

/** A part of the FlowCoordinator that keeps in memory something of its storage. */
export interface Forgetful {
  /** Forgets it: storage was wiped. */
  forget(): void;
}

/** What the incarnation checks need from the FlowCoordinator. */
export interface IncarnationHost {
  readonly ctx: DurableObjectState;
  readonly binding: FlowBinding;
  /** Every part that keeps memory of storage (stream, feed cursor, deadlines, nonces, messages). */
  readonly parts: Forgetful[];
  store(): Store;
  /** The flow's state in memory (GroupCommit's): undefined until loaded, null when there is none. */
  current(): FlowState | null | undefined;
  /** When the record was last seen to be the flow's (GroupCommit's). */
  readonly seen: RecordSeen;
  /** Loads the state (GroupCommit's load, which rebuilds through `rebuild` below). */
  load(): Promise<FlowState | null>;
  /** Forgets the state in memory. */
  forget(): void;
  /** Closes the subscribers of the stream that was wiped, telling them why. */
  close(reason: string): void;
}

/**
 * Keeps a FlowCoordinator from using storage of another incarnation of its flow (Redis flushed
 * or replaced, the flow deleted and its id given again): wherever the object reads its record
 * anyway, the record's token is judged against its storage's (FlowBinding), and storage that is
 * not the record's is wiped (journal, pending plan, stream, nonces, owed wake, outage mark, feed
 * cursor, alarm) with all memory of it, and the object goes on as a new one. Nothing is read for
 * it on the hot path: an object that holds its flow in memory reads nothing, and notices only
 * when it reads the record again (a creation, after its memory was lost).
 */
export class Incarnations {
  constructor(private readonly host: IncarnationHost) {}

  /**
   * Reads the flow from Redis plus the journal (GroupCommit's rebuild). Storage of another
   * incarnation, or of a flow that is gone, is wiped first, and the flow rebuilt from its
   * records alone. Keeps the scope once the flow is found.
   */
  async rebuild(journal: Journal): Promise<FlowState | null> {
    const { binding } = this.host;
    const stored = await readFlow(this.host.store(), binding.bound);
    if ((await binding.judge(stored ? { token: stored.incarnation } : null)) === "foreign") {
      await this.wipe();
      if (stored?.incarnation !== undefined) await binding.adopt(stored.incarnation);
      journal = {};
    }
    if (!stored) return null;
    await binding.keep();
    return rebuildFrom(binding.bound, stored, journal);
  }

  /**
   * Whether a commit plan left pending is this flow's, by its record's token (one read, before
   * the plan is run again: run on another flow's keys it would write into them). If not, storage
   * is wiped, the plan with it.
   */
  ownsPending(): Promise<boolean> {
    return this.stillOwn();
  }

  /**
   * The state to act on due deadlines with (from the alarm, or the sweep's poke). A state memory
   * held already is first checked against its record when a deadline is due (one read, and only
   * then: the failure path): acting on it after Redis lost the flow would write the attempt's end
   * into keys Redis no longer has, as a partial record of nothing.
   */
  async loadToAct(now = Date.now()): Promise<FlowState | null> {
    const held = this.host.current();
    const state = await this.host.load();
    if (!held || !state || dueDeadlines(state, now).length === 0 || (await this.stillOwn())) return state;
    return this.host.load();
  }

  /**
   * The state to answer a view with. Memory that has not seen its record for
   * REVOCATION_CHECK_MS is checked against it first (one command, at most once a second of
   * views): a flow Redis lost (wiped, replaced) is not shown from memory, to the actor who holds
   * its id in a new database least of all; it is wiped, and the view finds no flow.
   */
  async recheck(now = Date.now()): Promise<FlowState | null> {
    if (this.host.current() && this.host.seen.stale(now) && (await this.stillOwn())) this.host.seen.seenAt(now);
    return this.host.load();
  }

  /**
   * Before a creation: what the object holds of another incarnation goes, so a new flow under
   * this id starts clean (not refused as a retry, nor appended to the old stream). A state in
   * memory is checked with one read of the record's token; an object with history and nothing in
   * memory reads the flow (`rebuild` judges it); a new object reads nothing.
   */
  async clearForeign(): Promise<void> {
    const current = this.host.current();
    if (current) await this.stillOwn();
    else if (current === undefined && this.host.binding.hasHistory) await this.host.load();
  }

  /**
   * Whether storage (and memory) is still the record's, by the record's token (one command); if
   * not, both are wiped and forgotten.
   */
  private async stillOwn(): Promise<boolean> {
    const { binding } = this.host;
    if ((await binding.judge(await readRecordToken(this.host.store(), binding.bound))) === "own") return true;
    await this.wipe();
    this.host.forget();
    return false;
  }

  /**
   * Wipes the object's storage (wipeStorage) and what its parts keep in memory of it, as if the
   * object were new; the scope stays bound. The flow's state in memory is for the caller to
   * forget (GroupCommit's forget), unless it is reading it.
   */
  async wipe(why = "it belonged to another incarnation of the flow"): Promise<void> {
    const scope = this.host.binding.bound;
    const what = scope.job ? `job ${scope.job.id} of actor ${scope.job.callerId}` : `flow ${scope.flowId}`;
    console.warn(`${what} of context ${scope.contextId}: its object's storage was wiped: ${why}`);
    await wipeStorage(this.host.ctx);
    this.host.binding.wiped();
    for (const part of this.host.parts) part.forget();
    this.host.close(`the flow's stream was wiped (${why}): subscribe again from the start`);
  }
}
