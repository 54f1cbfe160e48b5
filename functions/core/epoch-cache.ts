import type { Store } from "../../shared/store/index.js";
import { keyCache } from "./key-cache.js";

interface Entry<T> {
  value: T;
  /** The epoch read before the value was: a change that bumps it after makes this stale. */
  epoch: string;
  expires: number;
}

const MAX_ENTRIES = 10_000;

/**
 * Records this isolate read from storage and keeps, trusted under the revocation epoch the way
 * public keys are (key-cache.ts): a change that bumps the epoch (`store.keyEpoch.bump()`) makes
 * every isolate read the record again within REVOCATION_CHECK_MS, and the isolate that made the
 * change at once (`forget`). An entry lives `ttlSeconds` at most (KEY_CACHE_SECONDS; 0 keeps
 * nothing). The epoch names the database too (its identity, Keys.storeIdentity): a database
 * wiped or replaced under the isolate makes every entry stale. Checking the epoch costs at most
 * one read per isolate a second, shared with the key cache; a hit costs no storage command.
 * Instances live at a module's top level (each registers with the key cache once).
 */
export class EpochCache<T> {
  private readonly entries = new Map<string, Entry<T>>();

  constructor() {
    // Entries are trusted under the epoch, which names the database too: those of a database
    // that was wiped or replaced would never be used again. They go at once all the same.
    keyCache.onReset((prefix) => {
      for (const key of this.entries.keys()) if (key.startsWith(`${prefix}\n`)) this.entries.delete(key);
    });
  }

  /**
   * The cached value of `id`, if `usable` accepts it, else `load`'s (kept unless undefined).
   * `usable` lets a caller read again rather than trust a cached answer it would refuse on.
   */
  async get(
    store: Pick<Store, "keys" | "keyEpoch">,
    ttlSeconds: number,
    id: string | number,
    load: () => Promise<T | undefined>,
    usable: (value: T) => boolean = () => true,
  ): Promise<T | undefined> {
    const prefix = store.keys.prefix;
    const epoch = await keyCache.epoch(prefix, () => store.keyEpoch.read());
    const key = `${prefix}\n${id}`;
    const hit = this.entries.get(key);
    if (hit && hit.epoch === epoch && hit.expires > Date.now() && usable(hit.value)) return hit.value;
    const value = await load();
    if (value === undefined) this.entries.delete(key);
    else if (ttlSeconds > 0) {
      if (this.entries.size >= MAX_ENTRIES) this.entries.clear();
      this.entries.set(key, { value, epoch, expires: Date.now() + ttlSeconds * 1000 });
    }
    return value;
  }

  /** Forgets what this isolate holds of `id` (it just changed here). */
  forget(prefix: string, id: string | number): void {
    this.entries.delete(`${prefix}\n${id}`);
  }
}
