/** Where used nonces are kept in the object's storage: one key each, its value when it expires. */
export const NONCE_PREFIX = "nonce:";

/** The storage key of one used nonce. */
export const ledgerKey = (keyid: string, nonce: string): string => `${NONCE_PREFIX}${keyid} ${nonce}`;
/** How many uses go by between two sweeps of expired nonces. */
const SWEEP_EVERY = 256;

/**
 * Nonces of runner webhooks, kept in the flow's Durable Object storage instead of Redis: the
 * signature covers the job's URL, so a replay can only ever reach this same object, and keeping
 * them here costs the flow no storage commands. Entries expire with the signature skew.
 *
 * One storage key per nonce: a busy flow uses thousands within the skew (two or more reports per
 * job), and rewriting them all as one value at every report made each report dearer than the
 * last. Expired ones are swept every SWEEP_EVERY uses. A read and the write that follows it are
 * not interleaved with another request's (the object's input gate), so a nonce is taken once.
 */
export class NonceLedger {
  private uses = 0;

  constructor(private readonly storage: DurableObjectStorage) {}

  /** Storage was wiped: nothing to forget (the ledger keeps nothing in memory but a count). */
  forget(): void {
    this.uses = 0;
  }

  /** Records a nonce; false when it was already used and has not expired. */
  async use(keyid: string, nonce: string, ttlMs: number, now = Date.now()): Promise<boolean> {
    const key = ledgerKey(keyid, nonce);
    const expires = await this.storage.get<number>(key);
    if (expires !== undefined && expires > now) return false;
    await this.storage.put(key, now + ttlMs);
    if (++this.uses % SWEEP_EVERY === 0) await this.sweep(now);
    return true;
  }

  private async sweep(now: number): Promise<void> {
    const kept = await this.storage.list<number>({ prefix: NONCE_PREFIX });
    const expired = [...kept].flatMap(([key, until]) => (until <= now ? [key] : []));
    // delete() takes at most 128 keys at once.
    for (let i = 0; i < expired.length; i += 128) await this.storage.delete(expired.slice(i, i + 128));
  }
}
