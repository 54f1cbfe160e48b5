import { importPublicKey } from "../../shared/auth/index.js";
import type { EpochReading } from "../../shared/store/index.js";

interface Entry {
  key: CryptoKey;
  pubkey: string;
  expires: number;
}

/** What this isolate knows of one deployment's (key prefix's) keys. */
interface Cached {
  entries: Map<string, Entry>;
  /** The last reading of the epoch and the database's identity; undefined until first read. */
  reading?: EpochReading;
  /** When the epoch was last read (ms), and the read under way if one is. */
  checkedAt: number;
  checking?: Promise<void> | undefined;
  /** Bumped whenever the entries are dropped: a lookup begun before does not store its answer. */
  generation: number;
}

/**
 * How often (at most) an isolate reads the revocation epoch before trusting its cache: a key
 * removed or rotated anywhere stops verifying everywhere within this, plus the request under way.
 */
export const REVOCATION_CHECK_MS = 1_000;
const MAX_ENTRIES = 10_000;
const deployments = new Map<string, Cached>();
/** Told when a deployment's database turned out to be another one (see `onReset`). */
const resetListeners: ((scope: string) => void)[] = [];

function cachedFor(scope: string): Cached {
  let cached = deployments.get(scope);
  if (!cached) {
    cached = { entries: new Map(), checkedAt: -Infinity, generation: 0 };
    deployments.set(scope, cached);
  }
  return cached;
}

/**
 * Reads the epoch when the last read is older than REVOCATION_CHECK_MS (one read at a time for
 * the whole isolate), and drops every entry when it changed. A database with another identity
 * than the one read before (wiped, or replaced) also has every other cache of the isolate
 * dropped (`onReset`): what they hold names actors, contexts and runners by ids that the new
 * database gives again to others. A failed read throws (the request is answered 503): a cached
 * key is never trusted past the bound.
 */
async function revalidate(cached: Cached, scope: string, readEpoch: () => Promise<EpochReading>): Promise<void> {
  if (Date.now() - cached.checkedAt < REVOCATION_CHECK_MS) return;
  cached.checking ??= (async () => {
    try {
      const startedAt = Date.now();
      const reading = await readEpoch();
      const before = cached.reading;
      if (reading.epoch !== before?.epoch) {
        cached.entries.clear();
        cached.generation++;
      }
      cached.reading = reading;
      cached.checkedAt = startedAt;
      if (before && reading.identity !== before.identity) {
        console.warn(
          `storage${scope ? ` (key prefix ${scope})` : ""} is another database than before (identity ${before.identity} -> ${reading.identity}: wiped or replaced): this isolate dropped its caches`,
        );
        for (const listener of resetListeners) listener(scope);
      }
    } finally {
      cached.checking = undefined;
    }
  })();
  await cached.checking;
}

/**
 * Public keys this isolate looked up, so a busy runner's webhooks do not each cost a storage
 * read. An entry lives `ttlSeconds` (KEY_CACHE_SECONDS, 0 disables the cache), but is trusted
 * only while the revocation epoch (`Keys.keyEpoch`, bumped by every key removal or rotation) and
 * the database's identity (`Keys.storeIdentity`, another after a wipe) are the ones it was cached
 * under, checked at most every REVOCATION_CHECK_MS: a revoked key, or every key of a wiped
 * database, stops working in every isolate within that bound. Cost: at most one MGET per isolate
 * per REVOCATION_CHECK_MS while it verifies requests, none while idle.
 */
export const keyCache = {
  async get(
    scope: string,
    keyid: string,
    ttlSeconds: number,
    load: () => Promise<string | null>,
    readEpoch: () => Promise<EpochReading>,
  ): Promise<CryptoKey | null> {
    const cached = cachedFor(scope);
    const now = Date.now();
    const hit = cached.entries.get(keyid);
    // Checked on a miss too: what the request is then judged by (`reading`) is never stale.
    await revalidate(cached, scope, readEpoch);
    const still = cached.entries.get(keyid);
    if (still && still.expires > now) return still.key;
    const generation = cached.generation;
    const pubkey = await load();
    if (pubkey === null) {
      cached.entries.delete(keyid);
      return null;
    }
    const key = hit?.pubkey === pubkey ? hit.key : await importPublicKey(pubkey);
    // Stored only if the entries were not dropped meanwhile: the key read may be the revoked one.
    if (ttlSeconds > 0 && generation === cached.generation) {
      if (cached.entries.size >= MAX_ENTRIES) cached.entries.clear();
      cached.entries.set(keyid, { key, pubkey, expires: now + ttlSeconds * 1000 });
    }
    return key;
  },

  /**
   * The epoch and the database's identity as this isolate last read them (read again when older
   * than REVOCATION_CHECK_MS).
   */
  async reading(scope: string, readEpoch: () => Promise<EpochReading>): Promise<EpochReading> {
    const cached = cachedFor(scope);
    await revalidate(cached, scope, readEpoch);
    return cached.reading as EpochReading;
  },

  /**
   * The revocation epoch, with the database's identity, as this isolate last read it (read again
   * when older than REVOCATION_CHECK_MS): what a long-lived session compares with the one it was
   * opened under, and what cached records are trusted under (epoch-cache.ts).
   */
  async epoch(scope: string, readEpoch: () => Promise<EpochReading>): Promise<string> {
    return (await keyCache.reading(scope, readEpoch)).epoch;
  },

  /** Forgets a keyid at once in this isolate (others drop it by the epoch): after a rotation or a removal. */
  forget(scope: string, keyid: string): void {
    cachedFor(scope).entries.delete(keyid);
  },

  /**
   * Has `listener` called with the deployment's key prefix whenever this isolate finds its
   * database to be another one than it read before (wiped, or replaced): a cache of anything
   * kept in that database drops it. Register once, at a module's top level.
   */
  onReset(listener: (scope: string) => void): void {
    resetListeners.push(listener);
  },
};
