import { WAITING_NONE, WAITING_SEVERAL, type ReadyQueue } from "../../shared/store/index.js";

/** A queue in the ring: when its turn is (lower first), and how often it was named since loaded. */
interface Entry extends ReadyQueue {
  turn: number;
  /** Bumped whenever a wake names the queue: a claim that found it empty drops it only if unchanged. */
  version: number;
}

/** A queue as a claim saw it: dropped after the claim only if nobody named it meanwhile. */
export interface SeenQueue {
  key: string;
  version: number;
}

const PREFIX = "ring:";
/** put() and delete() take at most 128 keys at once. */
const BATCH = 120;

/** What the ring needs of its Dispatcher (DispatchObject implements it). */
export interface RingHost {
  /** Writes the context's `dispatch_waiting`. */
  markWaiting(value: string): Promise<void>;
}

/**
 * The context's flows with ready attempts, in the order they get their turn: higher priority
 * first, then round-robin (a queue that was served goes to the back of its priority). Each entry
 * is one flow's queue of one script type (or pinned runner); the attempts themselves are in Redis.
 *
 * Which queues exist is kept in the Dispatcher's storage, written before the wake that named a
 * queue is answered, so it outlives the object's memory; the turn order is memory only (after a
 * restart, queues go in the order they were first named). A queue leaves when a claim finds it
 * empty and no wake named it while that claim ran, so a queue refilled meanwhile is never lost.
 *
 * Which flows it holds is told to commits (`mark`, the context's `dispatch_waiting`): a flow's
 * commit claims its own work only while no other flow's queue waits here (docs/dispatch.md,
 * "Claims in the commit"). The Dispatcher marks before it answers a wake that named a queue, and
 * before every claim of its rounds.
 */
export class ReadyRing {
  private entries: Map<string, Entry> | undefined;
  private turn = 0;
  /** The `dispatch_waiting` last written; undefined when not known (a fresh instance, a failed write). */
  private marked: string | undefined;
  private marking: Promise<unknown> = Promise.resolve();

  constructor(
    private readonly storage: DurableObjectStorage,
    private readonly host: RingHost,
  ) {}

  /** Adds queues a commit (or a refusal) put attempts in; durable once this resolves. */
  async add(queues: readonly ReadyQueue[]): Promise<void> {
    const entries = await this.loaded();
    // Memory changes only once storage has them: a queue this object knows is a durable one.
    const changed = new Map<string, Entry>();
    for (const queue of queues) {
      const known = entries.get(queue.key);
      if (known) known.version++;
      if (known && known.priority === queue.priority && known.maxParallel === queue.maxParallel) continue;
      const entry: Entry = { ...queue, turn: known?.turn ?? ++this.turn, version: (known?.version ?? -1) + 1 };
      changed.set(queue.key, entry);
    }
    const puts = [...changed.values()].map((e) => [PREFIX + e.key, stored(e)] as const);
    for (let i = 0; i < puts.length; i += BATCH) await this.storage.put(Object.fromEntries(puts.slice(i, i + BATCH)));
    for (const [key, entry] of changed) {
      const now = entries.get(key);
      // A claim may have bumped nothing meanwhile, but another add may have: keep the higher.
      entries.set(key, now ? { ...entry, version: Math.max(now.version, entry.version) + 1 } : entry);
    }
  }

  /**
   * Writes which flows wait here to the context's `dispatch_waiting`, when that changed since the
   * last write (or is not known: a fresh instance). Marks go one at a time, each with the ring as
   * it is then.
   */
  mark(): Promise<void> {
    const turn = this.marking.then(async () => {
      const flows = new Set([...(await this.loaded()).values()].map((e) => e.flow));
      const [only] = flows;
      const value = only === undefined ? WAITING_NONE : flows.size === 1 ? String(only) : WAITING_SEVERAL;
      if (value === this.marked) return;
      this.marked = undefined;
      await this.host.markWaiting(value);
      this.marked = value;
    });
    this.marking = turn.catch(() => undefined);
    return turn;
  }

  /** The queues in turn order, each with the version a claim should remember. */
  async ordered(): Promise<(ReadyQueue & SeenQueue)[]> {
    const entries = [...(await this.loaded()).values()];
    entries.sort((a, b) => b.priority - a.priority || a.turn - b.turn);
    return entries.map((e) => ({ ...plain(e), version: e.version }));
  }

  /** Queues that were given work go to the back of their priority. */
  served(keys: Iterable<string>): void {
    for (const key of keys) {
      const entry = this.entries?.get(key);
      if (entry) entry.turn = ++this.turn;
    }
  }

  /** Drops queues a claim found empty, unless a wake named them since the claim saw them. */
  async drop(seen: readonly SeenQueue[]): Promise<void> {
    const entries = await this.loaded();
    const gone = seen.filter((s) => entries.get(s.key)?.version === s.version).map((s) => s.key);
    for (const key of gone) entries.delete(key);
    for (let i = 0; i < gone.length; i += BATCH)
      await this.storage.delete(gone.slice(i, i + BATCH).map((k) => PREFIX + k));
  }

  /** Every queue's key (for counting what waits). */
  async keys(): Promise<string[]> {
    return [...(await this.loaded()).keys()];
  }

  private async loaded(): Promise<Map<string, Entry>> {
    if (!this.entries) {
      const stored = await this.storage.list<ReadyQueue & { turn: number }>({ prefix: PREFIX });
      const entries = new Map<string, Entry>();
      for (const value of stored.values()) {
        entries.set(value.key, { ...value, version: 0 });
        this.turn = Math.max(this.turn, value.turn);
      }
      // Another call may have loaded them while this one waited: keep the first.
      this.entries ??= entries;
    }
    return this.entries;
  }
}

function plain(entry: Entry): ReadyQueue {
  return {
    key: entry.key,
    flow: entry.flow,
    ...(entry.scriptType !== undefined ? { scriptType: entry.scriptType } : {}),
    ...(entry.runner !== undefined ? { runner: entry.runner } : {}),
    priority: entry.priority,
    ...(entry.maxParallel !== undefined ? { maxParallel: entry.maxParallel } : {}),
  };
}

function stored(entry: Entry): ReadyQueue & { turn: number } {
  return { ...plain(entry), turn: entry.turn };
}
