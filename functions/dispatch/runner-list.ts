import { z } from "zod";
import { Runner } from "../../shared/model/index.js";

/** The kept list, parsed as the runners' records are. */
const KeptList = z.array(Runner);

/**
 * How long the list is trusted: every change of a runner wakes the Dispatcher with `runners`,
 * which drops it at once, and so does the sweep when such a wake failed (a wake owed); this bounds
 * a change whose wakes were all lost. Long, since reloading the list costs a command per runner,
 * which a lone job would pay after every quiet spell.
 */
const TRUST_MS = 300_000;
/** The durable copy: survives the object's eviction, which a quiet context meets within seconds. */
const KEY = "runners";
/** A longer list is kept in memory only (a Durable Object value has a size limit). */
const MAX_KEPT = 100;

/** What the runner list needs of its Dispatcher (DispatchObject implements it). */
export interface RunnerListHost {
  /** The context's runners, read from Redis. */
  loadRunners(): Promise<Runner[]>;
  /** Called with each list loaded from Redis. */
  runnersLoaded(list: Runner[]): Promise<void>;
}

/**
 * The context's runners as the Dispatcher uses them: loaded from Redis at most every TRUST_MS,
 * and kept in memory and in the object's storage, so a lone job after a quiet spell (the object
 * evicted meanwhile) does not pay a reload of the list.
 */
export class RunnerList {
  private cached: { at: number; list: Runner[] } | undefined;
  private read = false;
  /** Bumped by every drop: a load that a drop overtook (its fetch let the wake in) is not kept. */
  private generation = 0;

  constructor(
    private readonly storage: DurableObjectStorage,
    private readonly host: RunnerListHost,
  ) {}

  /** The runners, from memory, the object's storage, or Redis. */
  async get(): Promise<Runner[]> {
    await this.readKept();
    const now = Date.now();
    if (this.cached && now - this.cached.at <= TRUST_MS) return this.cached.list;
    for (;;) {
      const generation = this.generation;
      const list = await this.host.loadRunners();
      // A runner changed while the list was on its way: it may predate the change.
      if (generation !== this.generation) continue;
      this.cached = { at: now, list };
      if (list.length <= MAX_KEPT) await this.storage.put(KEY, this.cached);
      else await this.storage.delete(KEY);
      await this.host.runnersLoaded(list);
      return list;
    }
  }

  /**
   * The runners as last loaded, however long ago (undefined: no list is kept), without a
   * command: which slot sets may hold claims. A runner the list does not name holds none the
   * object made (a change of runners drops the list, and a round loads it before it claims).
   */
  async known(): Promise<Runner[] | undefined> {
    await this.readKept();
    return this.cached?.list;
  }

  /** Reads the list kept in storage, once per instance. */
  private async readKept(): Promise<void> {
    if (!this.cached && !this.read) {
      const kept = await this.storage.get<{ at: number; list: unknown }>(KEY);
      // Read as the model reads a record: one that does not parse is loaded again.
      const list = kept && KeptList.safeParse(kept.list);
      this.cached = kept && list?.success ? { at: kept.at, list: list.data } : undefined;
      this.read = true;
    }
  }

  /** A runner changed: the next use loads the list again. */
  async drop(): Promise<void> {
    this.generation++;
    this.cached = undefined;
    this.read = true;
    await this.storage.delete(KEY);
  }
}
