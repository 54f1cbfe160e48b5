import { describe, expect, it } from "vitest";
import { formatMs } from "../../shared/model/durations.js";

describe("formatMs, the console's and flowc's durations", () => {
  it("says milliseconds under a second, tenths under ten seconds, then whole units", () => {
    expect([0, 7, 420, 999].map(formatMs)).toEqual(["0 ms", "7 ms", "420 ms", "999 ms"]);
    expect([1_000, 1_049, 9_250, 9_999].map(formatMs)).toEqual(["1 s", "1 s", "9.2 s", "9.9 s"]);
    expect([10_000, 42_900, 59_999].map(formatMs)).toEqual(["10 s", "42 s", "59 s"]);
    expect([60_000, 184_000, 3_599_999].map(formatMs)).toEqual(["1 min 00 s", "3 min 04 s", "59 min 59 s"]);
    expect([3_600_000, 3_720_000, 90_000_000, 273_600_000].map(formatMs)).toEqual([
      "1 h 00 min",
      "1 h 02 min",
      "1 d 1 h",
      "3 d 4 h",
    ]);
  });

  it("says nothing it cannot know", () => {
    expect([-1, Number.NaN, Number.POSITIVE_INFINITY].map(formatMs)).toEqual(["—", "—", "—"]);
  });
});
