import { describe, expect, it } from "vitest";
import { FlowSubmission } from "../../shared/flow/index.js";
import { sleepsPastDeadline, type SleepCheckJob } from "../../shared/flow/sleep-deadline.js";

// Sleeps that cannot end before their flow's deadline (timeouts.flow), refused at submission:
// alone, and after the sleeps they must wait for.

const NOW = Date.parse("2026-11-29T10:00:00Z");
const job = (name: string, fields: Partial<SleepCheckJob> = {}): SleepCheckJob => ({
  name,
  needs: "all_finished",
  depends: [],
  ...fields,
});

describe("sleepsPastDeadline", () => {
  it("refuses a sleep longer than the limit, and a sleep_until past it", () => {
    expect(
      sleepsPastDeadline(
        [
          job("long", { sleep: 61 }),
          job("fits", { sleep: 60 }),
          job("late", { sleep_until: "2026-11-29T10:01:01Z" }),
          job("soon", { sleep_until: "2026-11-29T10:01:00Z" }),
          job("later", { sleep_until: "${DEP_PLAN_AT}" }),
        ],
        60,
        NOW,
      ),
    ).toEqual([
      {
        index: 0,
        field: "sleep",
        message: "a sleep of 61 s cannot end within the flow's deadline (timeouts.flow: 60 s)",
      },
      {
        index: 2,
        field: "sleep_until",
        message: "2026-11-29T10:01:01Z is past the flow's deadline (timeouts.flow: 60 s from its start)",
      },
    ]);
  });

  it("adds up the sleeps a sleep must wait for, through the jobs between, and names the first past the limit", () => {
    const issues = sleepsPastDeadline(
      [
        job("first", { sleep: 40 }),
        job("check", { depends: ["first"] }),
        job("second", { sleep: 30, depends: ["check"] }),
        job("third", { sleep: 10, depends: ["second"] }),
      ],
      60,
      NOW,
    );
    // Only the second is named: the third waits for it, refused already.
    expect(issues).toEqual([
      {
        index: 2,
        field: "sleep",
        message:
          "a sleep of 30 s cannot end within the flow's deadline (timeouts.flow: 60 s): it starts no sooner than 40 s after the flow's start, once the sleeps it waits for ended (first → check)",
      },
    ]);
  });

  it("follows needs: the longest way for all_finished, the shortest for any_finished, nothing for all_done or none_failed", () => {
    const jobs = (needs: string) => [
      job("a", { sleep: 50 }),
      job("b", { sleep: 5 }),
      job("after", { id: 9, sleep: 20, depends: ["a", "b"], needs }),
    ];
    expect(sleepsPastDeadline(jobs("all_finished"), 60, NOW).map((i) => i.index)).toEqual([2]);
    expect(sleepsPastDeadline(jobs("any_finished"), 60, NOW)).toEqual([]);
    expect(sleepsPastDeadline(jobs("all_done"), 60, NOW)).toEqual([]);
    expect(sleepsPastDeadline(jobs("none_failed"), 60, NOW)).toEqual([]);
    // Dependencies by id count the same.
    const byId = [job("x", { id: 4, sleep: 50 }), job("y", { sleep: 20, depends: [4] })];
    expect(sleepsPastDeadline(byId, 60, NOW).map((i) => i.index)).toEqual([1]);
  });

  it("names the last few jobs of a long way, and takes a chain of 10,000 jobs without recursing", () => {
    const chain = Array.from({ length: 10_000 }, (_, i) =>
      job(`j${i}`, { sleep: 1, depends: i === 0 ? [] : [`j${i - 1}`] }),
    );
    const issues = sleepsPastDeadline(chain, 100, NOW);
    expect(issues).toHaveLength(1);
    expect(issues[0]).toMatchObject({ index: 100, field: "sleep" });
    expect(issues[0]?.message).toMatch(/starts no sooner than 100 s .* \(… → j95 → j96 → j97 → j98 → j99\)$/);
  });

  it("counts unknown dependencies and cycles (refused elsewhere) as nothing", () => {
    const jobs = [
      job("a", { sleep: 50, depends: ["b"] }),
      job("b", { sleep: 50, depends: ["a"] }),
      job("c", { sleep: 50, depends: ["nobody"] }),
    ];
    expect(sleepsPastDeadline(jobs, 60, NOW)).toEqual([]);
  });
});

describe("a submission", () => {
  it("is refused naming the sleep that cannot end before the flow's deadline", () => {
    const parsed = FlowSubmission.safeParse({
      timeouts: { flow: 60 },
      jobs: [
        { name: "first", sleep: 40 },
        { name: "second", sleep: 30, depends: ["first"] },
      ],
    });
    expect(parsed.success).toBe(false);
    expect(parsed.error?.issues.map((i) => [i.path.join("."), i.message])).toEqual([
      [
        "jobs.1.sleep",
        "a sleep of 30 s cannot end within the flow's deadline (timeouts.flow: 60 s): it starts no sooner than 40 s after the flow's start, once the sleeps it waits for ended (first)",
      ],
    ]);
    // Without a deadline, or with room, it is taken.
    expect(FlowSubmission.safeParse({ jobs: [{ name: "n", sleep: 3600 }] }).success).toBe(true);
    expect(
      FlowSubmission.safeParse({
        timeouts: { flow: 70 },
        jobs: [
          { name: "first", sleep: 40 },
          { name: "second", sleep: 30, depends: ["first"] },
        ],
      }).success,
    ).toBe(true);
  });
});
