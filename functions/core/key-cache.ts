import { importPublicKey } from "../../shared/auth/index.js";

interface Entry {
  key: CryptoKey;
  pubkey: string;
  expires: number;
}

/** What this isolate knows of one deployment's (key prefix's) keys. */
interface Cached {
  entries: Map<string, Entry>;
  /** The revocation epoch the entries are valid for; undefined until first read. */
  epoch?: string;
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
 * the whole isolate), and drops every entry when it changed. A failed read throws (the request
 * is answered 503): a cached key is never trusted past the bound.
 */
async function revalidate(cached: Cached, readEpoch: () => Promise<string>): Promise<void> {
  if (Date.now() - cached.checkedAt < REVOCATION_CHECK_MS) return;
  cached.checking ??= (async () => {
    try {
      const startedAt = Date.now();
      const epoch = await readEpoch();
      if (epoch !== cached.epoch) {
        cached.entries.clear();
        cached.generation++;
        cached.epoch = epoch;
      }
      cached.checkedAt = startedAt;
    } finally {
      cached.checking = undefined;
    }
  })();
  await cached.checking;
}

/**
 * Public keys this isolate looked up, so a busy runner's webhooks do not each cost a storage
 * read. An entry lives `ttlSeconds` (KEY_CACHE_SECONDS, 0 disables the cache), but is trusted
 * only while the revocation epoch (`Keys.keyEpoch`, bumped by every key removal or rotation) is
 * the one it was cached under, checked at most every REVOCATION_CHECK_MS: a revoked key stops
 * working in every isolate within that bound. Cost: at most one GET per isolate per
 * REVOCATION_CHECK_MS while it verifies requests from its cache, none while idle.
 */
export const keyCache = {
  async get(
    scope: string,
    keyid: string,
    ttlSeconds: number,
    load: () => Promise<string | null>,
    readEpoch: () => Promise<string>,
  ): Promise<CryptoKey | null> {
    const cached = cachedFor(scope);
    const now = Date.now();
    const hit = cached.entries.get(keyid);
    if (hit && hit.expires > now) {
      await revalidate(cached, readEpoch);
      const still = cached.entries.get(keyid);
      if (still) return still.key;
    }
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
   * The revocation epoch as this isolate last read it (read again when older than
   * REVOCATION_CHECK_MS): what a long-lived session compares with the one it was opened under.
   */
  async epoch(scope: string, readEpoch: () => Promise<string>): Promise<string> {
    const cached = cachedFor(scope);
    await revalidate(cached, readEpoch);
    return cached.epoch ?? "0";
  },

  /** Forgets a keyid at once in this isolate (others drop it by the epoch): after a rotation or a removal. */
  forget(scope: string, keyid: string): void {
    cachedFor(scope).entries.delete(keyid);
  },
};
