import { describe, expect, it } from "vitest";
import { DeliveredClaims, SETTLE_DELIVERED_AFTER_MS } from "../../functions/dispatch/delivered.js";

// The Dispatcher's delivered claims whose "delivered" mark in Redis is held back: most attempts
// end (their slot freed by the commit) before a mark would be needed at all.

const T = 1_000_000;
const held = (item: string) => ({ runner: 1, item });

describe("delivered claims held back", () => {
  it("needs no mark for a claim whose slot was freed, and marks one still held after the delay", () => {
    const d = new DeliveredClaims();
    d.add([held("a"), held("b")], T);
    expect(d.nextDue()).toBe(T + SETTLE_DELIVERED_AFTER_MS);
    d.release(["a"], T + 5);
    expect(d.has("a")).toBe(false);
    expect(d.has("b")).toBe(true);
    expect(d.due(T + SETTLE_DELIVERED_AFTER_MS - 1)).toEqual([]);
    expect(d.due(T + SETTLE_DELIVERED_AFTER_MS)).toEqual([held("b")]);
    expect(d.nextDue()).toBeUndefined();
  });

  it("needs no mark when the slot was freed before the delivery's answer came", () => {
    const d = new DeliveredClaims();
    d.release(["a"], T);
    d.add([held("a")], T + 1);
    expect(d.has("a")).toBe(false);
    // Remembered only a while: an item is not released twice.
    d.release([], T + SETTLE_DELIVERED_AFTER_MS + 2);
    d.add([held("a")], T + SETTLE_DELIVERED_AFTER_MS + 3);
    expect(d.has("a")).toBe(true);
  });

  it("marks everything at once when too many are held", () => {
    const d = new DeliveredClaims();
    d.add(
      Array.from({ length: 5_001 }, (_, i) => held(`i${i}`)),
      T,
    );
    expect(d.due(T + 1)).toHaveLength(5_001);
  });
});
