import { describe, expect, it } from "vitest";
import {
  attemptKey,
  RECENT_ATTEMPTS_MAX,
  RECENT_ATTEMPTS_WINDOW_MS,
  RecentAttempts,
} from "../../runner/recent-attempts.js";

// The reference runner's memory of the attempts it took, which drops a repeated delivery of one
// (the contract for runners in docs/runners.md: answer it 2xx, do not run it again). A fleet's gateway can
// keep one too.

const T = 1_800_000_000_000;
const key = (attempt: number, message = 7) => attemptKey({ context_id: 1, caller_id: 2, message_id: message, attempt });

describe("recent attempts", () => {
  it("takes an attempt once: a repeat is refused while it runs and for the window after it ended", () => {
    const recent = new RecentAttempts({ windowMs: 1_000 });
    expect(recent.take(key(1), T)).toBe(true);
    expect(recent.take(key(1), T + 1)).toBe(false);
    // Held, however long it runs.
    expect(recent.has(key(1), T + 10 * RECENT_ATTEMPTS_WINDOW_MS)).toBe(true);
    // Another attempt of the same job (a retry) is another attempt.
    expect(recent.take(key(2), T + 2)).toBe(true);
    recent.release(key(1), T + 5_000);
    expect(recent.take(key(1), T + 5_999)).toBe(false);
    expect(recent.has(key(1), T + 6_000)).toBe(false);
    expect(recent.take(key(1), T + 6_000)).toBe(true);
  });

  it("forgets an attempt whose taking failed, so that its repeat is taken", () => {
    const recent = new RecentAttempts();
    expect(recent.take(key(1), T)).toBe(true);
    recent.forget(key(1));
    expect(recent.take(key(1), T + 1)).toBe(true);
  });

  it("keeps at most `max` ended attempts, the oldest forgotten first, and says so once", () => {
    const warnings: string[] = [];
    const recent = new RecentAttempts({ windowMs: 60_000, max: 3, warn: (line) => warnings.push(line) });
    for (let m = 1; m <= 5; m++) {
      recent.take(key(1, m), T + m);
      recent.release(key(1, m), T + m);
    }
    expect(recent.size).toBe(3);
    expect([1, 2, 3, 4, 5].map((m) => recent.has(key(1, m), T + 10))).toEqual([false, false, true, true, true]);
    expect(warnings).toEqual([
      "more than 3 attempts ended within 1 min: the oldest are forgotten sooner, and a repeated delivery of one would run it again",
    ]);
    // Those past the window go without a word, and without waiting to be the oldest past `max`.
    recent.take(key(1, 6), T + 60_010);
    recent.release(key(1, 6), T + 60_010);
    expect(recent.size).toBe(1);
    expect(warnings).toHaveLength(1);
  });

  it("holds, by default, an hour of ended attempts, up to 100,000", () => {
    expect(RECENT_ATTEMPTS_WINDOW_MS).toBe(3_600_000);
    expect(RECENT_ATTEMPTS_MAX).toBe(100_000);
  });
});
