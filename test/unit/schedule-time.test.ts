import { describe, expect, it } from "vitest";
import {
  cronProblem,
  firesBetween,
  MAX_SCAN,
  nextFireAfter,
  ON_TIME_MS,
  planDue,
  type FireSpec,
} from "../../shared/model/schedule-time.js";

// When schedules fire (docs/schedules.md): cron expressions of 5 and 6 fields in a time zone,
// across a daylight-saving change; intervals from their anchor, without drift; and what an alarm
// that rings late owes (the fire on time, missed fires run or skipped by the catch-up policy).

const at = (iso: string) => Date.parse(iso);
const iso = (ms: number | undefined) => (ms === undefined ? undefined : new Date(ms).toISOString());
const cron = (expression: string, timezone = "UTC"): FireSpec => ({ cron: expression, timezone, anchor_ms: 0 });
const every = (seconds: number, anchor: string): FireSpec => ({ interval_seconds: seconds, anchor_ms: at(anchor) });

describe("cron expressions", () => {
  it("accepts 5 and 6 fields and names what is wrong with the others", () => {
    expect(cronProblem("*/5 * * * *")).toBeUndefined();
    expect(cronProblem("*/10 * * * * *")).toBeUndefined();
    expect(cronProblem("0 9 * * MON-FRI")).toBeUndefined();
    expect(cronProblem("* * * *")).toMatch(/five, six, or seven/);
    expect(cronProblem("* * * * * * *")).toMatch(/5 or 6 parts/);
    expect(cronProblem("61 * * * *")).toMatch(/minute/);
    expect(cronProblem("not cron")).toBeDefined();
  });

  it("fires a 5-field expression on the minute and a 6-field one on the second, strictly after the time given", () => {
    expect(iso(nextFireAfter(cron("*/15 * * * *"), at("2026-01-01T10:07:30Z")))).toBe("2026-01-01T10:15:00.000Z");
    expect(iso(nextFireAfter(cron("*/15 * * * *"), at("2026-01-01T10:15:00Z")))).toBe("2026-01-01T10:30:00.000Z");
    expect(iso(nextFireAfter(cron("*/10 * * * * *"), at("2026-01-01T10:00:00.500Z")))).toBe("2026-01-01T10:00:10.000Z");
    expect(iso(nextFireAfter(cron("* * * * * *"), at("2026-01-01T10:00:00Z")))).toBe("2026-01-01T10:00:01.000Z");
  });

  it("reads the expression in its time zone, across a daylight-saving change", () => {
    // 09:00 in New York: 14:00 UTC in winter, 13:00 UTC after the clocks go forward (8 March 2026).
    const nine = cron("0 9 * * *", "America/New_York");
    expect(iso(nextFireAfter(nine, at("2026-03-07T12:00:00Z")))).toBe("2026-03-07T14:00:00.000Z");
    expect(iso(nextFireAfter(nine, at("2026-03-07T15:00:00Z")))).toBe("2026-03-08T13:00:00.000Z");
    // 02:30 in Berlin does not exist on 29 March 2026 (02:00 → 03:00): it fires at the first valid time.
    const gap = cron("0 30 2 * * *", "Europe/Berlin");
    expect(iso(nextFireAfter(gap, at("2026-03-28T12:00:00Z")))).toBe("2026-03-29T01:00:00.000Z");
    expect(iso(nextFireAfter(gap, at("2026-03-29T12:00:00Z")))).toBe("2026-03-30T00:30:00.000Z");
    // Every 30 minutes through the night New York's clocks go back (1 November 2026): 01:00–02:00
    // happens twice, and each half hour fires in both, 30 minutes apart in UTC.
    const half = cron("*/30 * * * *", "America/New_York");
    const { newest } = firesBetween(half, at("2026-11-01T04:45:00Z"), at("2026-11-01T07:15:00Z"), 10);
    expect(newest.map(iso)).toEqual([
      "2026-11-01T05:00:00.000Z",
      "2026-11-01T05:30:00.000Z",
      "2026-11-01T06:00:00.000Z",
      "2026-11-01T06:30:00.000Z",
      "2026-11-01T07:00:00.000Z",
    ]);
  });
});

describe("intervals", () => {
  it("fire at anchor + k × interval whenever the alarm rang: no drift", () => {
    const spec = every(30, "2026-01-01T00:00:00Z");
    expect(iso(nextFireAfter(spec, at("2025-12-31T00:00:00Z")))).toBe("2026-01-01T00:00:30.000Z");
    expect(iso(nextFireAfter(spec, at("2026-01-01T00:00:00Z")))).toBe("2026-01-01T00:00:30.000Z");
    // An alarm that rang 1.7 s late does not move the next fire.
    expect(iso(nextFireAfter(spec, at("2026-01-01T00:00:31.700Z")))).toBe("2026-01-01T00:01:00.000Z");
    // A thousand fires later, each computed from a late alarm, still on the grid.
    let t = at("2026-01-01T00:00:00Z");
    for (let i = 0; i < 1000; i++) t = nextFireAfter(spec, t + 1234) as number;
    expect(iso(t)).toBe(iso(at("2026-01-01T00:00:00Z") + 1000 * 30_000));
    expect(t % 30_000).toBe(0);
  });

  it("count the fires of a window arithmetically, however many", () => {
    const spec = every(1, "2026-01-01T00:00:00Z");
    const day = firesBetween(spec, at("2026-01-01T00:00:00Z"), at("2026-01-02T00:00:00Z"), 3);
    expect(day.count).toBe(86_400);
    expect(day.newest.map(iso)).toEqual([
      "2026-01-01T23:59:58.000Z",
      "2026-01-01T23:59:59.000Z",
      "2026-01-02T00:00:00.000Z",
    ]);
  });
});

describe("what a late alarm owes", () => {
  const spec = every(60, "2026-01-01T00:00:00Z");
  const run = (max: number) => ({ policy: "run" as const, max });
  const skip = { policy: "skip" as const, max: 10 };

  it("owes the fire on time and nothing else when the alarm rang on time (or a little late)", () => {
    expect(planDue(spec, at("2026-01-01T00:00:00Z"), at("2026-01-01T00:01:00.040Z"), skip)).toEqual({
      current: at("2026-01-01T00:01:00Z"),
      catchup: [],
      skipped: 0,
      latest: at("2026-01-01T00:01:00Z"),
    });
    expect(planDue(spec, at("2026-01-01T00:01:00Z"), at("2026-01-01T00:01:30Z"), skip)).toEqual({
      catchup: [],
      skipped: 0,
    });
  });

  it("skips missed fires, saying how many and from when to when", () => {
    const plan = planDue(spec, at("2026-01-01T00:00:00Z"), at("2026-01-01T00:10:05Z"), skip);
    expect(iso(plan.current)).toBe("2026-01-01T00:10:00.000Z");
    expect(plan.catchup).toEqual([]);
    expect([plan.skipped, iso(plan.skippedFrom), iso(plan.skippedTo)]).toEqual([
      9,
      "2026-01-01T00:01:00.000Z",
      "2026-01-01T00:09:00.000Z",
    ]);
  });

  it("runs the newest `max` missed fires, oldest first, and skips the rest", () => {
    const plan = planDue(spec, at("2026-01-01T00:00:00Z"), at("2026-01-01T00:10:05Z"), run(3));
    expect(plan.catchup.map(iso)).toEqual([
      "2026-01-01T00:07:00.000Z",
      "2026-01-01T00:08:00.000Z",
      "2026-01-01T00:09:00.000Z",
    ]);
    expect(iso(plan.current)).toBe("2026-01-01T00:10:00.000Z");
    expect([plan.skipped, iso(plan.skippedFrom), iso(plan.skippedTo)]).toEqual([
      6,
      "2026-01-01T00:01:00.000Z",
      "2026-01-01T00:06:00.000Z",
    ]);
    // Fewer missed than max: all run, none skipped.
    const few = planDue(spec, at("2026-01-01T00:00:00Z"), at("2026-01-01T00:03:00Z"), run(5));
    expect([few.catchup.length, few.skipped, iso(few.current)]).toEqual([2, 0, "2026-01-01T00:03:00.000Z"]);
  });

  it("counts the newest due fire as missed too once it is more than ON_TIME_MS late", () => {
    const late = at("2026-01-01T00:10:00Z") + ON_TIME_MS + 1;
    const plan = planDue(every(600, "2026-01-01T00:00:00Z"), at("2026-01-01T00:00:00Z"), late, skip);
    expect(plan.current).toBeUndefined();
    expect([plan.skipped, iso(plan.latest)]).toEqual([1, "2026-01-01T00:10:00.000Z"]);
  });

  it("walks a cron expression's missed fires up to MAX_SCAN, then reads the newest backwards", () => {
    const seconds = cron("* * * * * *");
    const small = planDue(seconds, at("2026-01-01T00:00:00Z"), at("2026-01-01T00:00:10.2Z"), run(2));
    expect([small.catchup.map(iso), iso(small.current), small.skipped]).toEqual([
      ["2026-01-01T00:00:08.000Z", "2026-01-01T00:00:09.000Z"],
      "2026-01-01T00:00:10.000Z",
      7,
    ]);
    const huge = planDue(seconds, at("2026-01-01T00:00:00Z"), at("2026-01-02T00:00:00Z"), run(2));
    expect(huge.catchup.map(iso)).toEqual(["2026-01-01T23:59:58.000Z", "2026-01-01T23:59:59.000Z"]);
    expect(iso(huge.current)).toBe("2026-01-02T00:00:00.000Z");
    expect(huge.skipped).toBe(MAX_SCAN - 3);
  });
});
