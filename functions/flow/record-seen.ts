import { REVOCATION_CHECK_MS } from "../core/key-cache.js";

/**
 * When a flow's object last saw its record in Redis to be its flow's (read back, created, or
 * found by a commit's check). Memory that has not seen it for REVOCATION_CHECK_MS is checked
 * again before it is written from (a commit's check, group-commit.ts) or shown (a view,
 * incarnation.ts): a Redis wiped or replaced under the object gets at most that second of its
 * writes, as it gets that second of requests signed with keys it no longer has.
 */
export class RecordSeen {
  private at = -Infinity;

  /** Whether the record was last seen REVOCATION_CHECK_MS or more before `now`. */
  stale(now: number): boolean {
    return now - this.at >= REVOCATION_CHECK_MS;
  }

  /** The record was seen to be the flow's at `at` (epoch ms). */
  seenAt(at: number): void {
    this.at = Math.max(this.at, at);
  }

  /** Memory was forgotten: the next commit checks the record. */
  lost(): void {
    this.at = -Infinity;
  }
}
