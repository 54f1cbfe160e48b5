import type { Held } from "../../shared/store/index.js";

/**
 * How long a delivered claim may wait for its attempt to end before it is settled in Redis
 * anyway: well before the reaper would take it for abandoned (REAP_AFTER_MS, 30 s).
 */
export const SETTLE_DELIVERED_AFTER_MS = 15_000;
/** Most delivered claims held back at once: past this, they are settled at the next round. */
const MOST_HELD = 5_000;

/**
 * Claims this Dispatcher delivered whose slots still read "claimed" in Redis. Marking each one
 * delivered there (a ZADD per round) is a storage command that, for most attempts, comes just
 * before the commit that ends the attempt frees the slot anyway. So the mark waits: a commit's
 * wake names the items whose slots it freed (`released`), and those need no mark at all; what
 * is still held after SETTLE_DELIVERED_AFTER_MS (a long job) is marked then, before the reaper
 * could take it for abandoned. Memory only: an instance that dies leaves its claims unsettled
 * in Redis, and the reaper asks their owners, who answer that they delivered them.
 */
export class DeliveredClaims {
  private readonly held = new Map<string, { held: Held; at: number }>();
  /** Items whose slots were freed lately, in case a release comes before its delivery's answer. */
  private readonly released = new Map<string, number>();

  /** Holds back the mark of claims just delivered. */
  add(claims: Held[], now = Date.now()): void {
    for (const c of claims) if (!this.released.has(c.item)) this.held.set(c.item, { held: c, at: now });
  }

  /** The slots of these items were freed: their marks are not needed. */
  release(items: string[], now = Date.now()): void {
    for (const item of items) {
      if (!this.held.delete(item)) this.released.set(item, now);
    }
    for (const [item, at] of this.released) if (now - at > SETTLE_DELIVERED_AFTER_MS) this.released.delete(item);
  }

  /** Whether `item` is a delivered claim held back here (the reaper leaves it alone). */
  has(item: string): boolean {
    return this.held.has(item);
  }

  /** Takes the claims to mark now: those held long enough, or all when too many are held. */
  due(now = Date.now()): Held[] {
    const all = this.held.size > MOST_HELD;
    const out: Held[] = [];
    for (const [item, { held, at }] of this.held) {
      if (all || now - at >= SETTLE_DELIVERED_AFTER_MS) {
        out.push(held);
        this.held.delete(item);
      }
    }
    return out;
  }

  /** When the oldest held claim is due to be marked (epoch ms), if any is held. */
  nextDue(): number | undefined {
    let oldest: number | undefined;
    for (const { at } of this.held.values()) oldest = oldest === undefined ? at : Math.min(oldest, at);
    return oldest === undefined ? undefined : oldest + SETTLE_DELIVERED_AFTER_MS;
  }
}
