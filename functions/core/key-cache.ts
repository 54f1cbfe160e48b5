import { importPublicKey } from "../../shared/auth/index.js";

interface Entry {
  key: CryptoKey;
  pubkey: string;
  expires: number;
}

const entries = new Map<string, Entry>();
const MAX_ENTRIES = 10_000;

/**
 * Public keys this isolate looked up recently, so a busy runner's webhooks do not each cost a
 * storage read. An entry lives `ttlSeconds`; a rotated or removed key may therefore still verify
 * in another isolate for that long (KEY_CACHE_SECONDS, 0 disables the cache).
 */
export const keyCache = {
  async get(
    scope: string,
    keyid: string,
    ttlSeconds: number,
    load: () => Promise<string | null>,
  ): Promise<CryptoKey | null> {
    const id = `${scope}|${keyid}`;
    const now = Date.now();
    const hit = entries.get(id);
    if (hit && hit.expires > now) return hit.key;
    const pubkey = await load();
    if (pubkey === null) {
      entries.delete(id);
      return null;
    }
    const key = hit?.pubkey === pubkey ? hit.key : await importPublicKey(pubkey);
    if (ttlSeconds > 0) {
      if (entries.size >= MAX_ENTRIES) entries.clear();
      entries.set(id, { key, pubkey, expires: now + ttlSeconds * 1000 });
    }
    return key;
  },

  /** Forgets a keyid at once (this isolate only): after a rotation or a removal. */
  forget(scope: string, keyid: string): void {
    entries.delete(`${scope}|${keyid}`);
  },
};
