/**
 * Nonces of runner webhooks, kept in the flow's Durable Object storage instead of Redis: the
 * signature covers the job's URL, so a replay can only ever reach this same object, and keeping
 * them here costs the flow no storage commands. Entries expire with the signature skew.
 */
export class NonceLedger {
  private seen: Record<string, number> | undefined;

  constructor(private readonly storage: DurableObjectStorage) {}

  /** Records a nonce; false when it was already used and has not expired. */
  async use(keyid: string, nonce: string, ttlMs: number, now = Date.now()): Promise<boolean> {
    this.seen ??= (await this.storage.get<Record<string, number>>("nonces")) ?? {};
    const id = `${keyid} ${nonce}`;
    const expires = this.seen[id];
    if (expires !== undefined && expires > now) return false;
    for (const [key, until] of Object.entries(this.seen)) if (until <= now) delete this.seen[key];
    this.seen[id] = now + ttlMs;
    await this.storage.put("nonces", this.seen);
    return true;
  }
}
