import { describe, expect, it } from "vitest";
import { flowView, jobTimes } from "../../functions/flow/view.js";
import type { JobState } from "../../shared/flow/index.js";
import { jobIn, started, T } from "./flow-sim.js";

// What the flow's view says of time to the millisecond (docs/console.md, "Time"): each job's
// queue, start, end and duration, and the flow's start and end, from the machine's own instants
// (injected with each event), so the console can show "420 ms" and draw its timeline.

describe("times in a flow's view", () => {
  it("gives each job its queue, start, end and duration in ms, and the flow its start and end", () => {
    const d = started([jobIn({ name: "a" }), jobIn({ name: "b", depends: ["a"] })]);
    d.run(100, { at: T + 1_000 }); // assigned +1000, delivered +1001, started +1002, finished +1003
    const running = flowView(d.state);
    expect(running.started_at_ms).toBe(T);
    expect(running.ended_at_ms).toBeUndefined();
    const [a, b] = running.jobs;
    expect(a).toMatchObject({ queued_at_ms: T, started_at_ms: T + 1_002, ended_at_ms: T + 1_003, duration_ms: 1 });
    // b was queued when a finished; not delivered yet: no start.
    expect(b).toMatchObject({ queued_at_ms: T + 1_003 });
    expect(b?.started_at_ms).toBeUndefined();

    // Delivered but not reported started: its delivery is its start, and it has no end yet.
    d.send({ type: "assigned", job: 101, attempt: 1, runner: 1, at: T + 1_400 });
    d.send({ type: "delivered", job: 101, attempt: 1, runner: 1, acknowledged: true, at: T + 1_420 });
    expect(jobTimes(d.job(101))).toEqual({ queued_at_ms: T + 1_003, started_at_ms: T + 1_420 });
    d.send({ type: "finished", job: 101, attempt: 1, runner: 1, result: {}, at: T + 1_840 });
    const done = flowView(d.state);
    expect(done.jobs[1]).toMatchObject({ started_at_ms: T + 1_420, ended_at_ms: T + 1_840, duration_ms: 420 });
    expect([done.started_at_ms, done.ended_at_ms]).toEqual([T, T + 1_840]);
    expect(done.ended_at).toBe(Math.floor((T + 1_840) / 1000));
  });

  it("gives a job that never ran its end and no start, and a re-run forgets the end", () => {
    const d = started([jobIn({ name: "a" }), jobIn({ name: "b", depends: ["a"] })]);
    d.run(100, { at: T + 500, error: "boom" });
    // b never ran: its dependency failed. It ended (not run) with no start and no duration.
    expect(jobTimes(d.job(101))).toEqual({ ended_at_ms: T + 503 });
    expect(jobTimes(d.job(100))).toMatchObject({ started_at_ms: T + 502, ended_at_ms: T + 503, duration_ms: 1 });
    d.send({ type: "rerun", bases: { 100: 2000, 101: 2001 }, at: T + 9_000 });
    expect(d.job(100).endedAt).toBeUndefined();
    expect(jobTimes(d.job(101)).ended_at_ms).toBeUndefined();
  });

  it("gives a cancelled job its end", () => {
    const d = started([jobIn({ name: "a" })]);
    d.send({ type: "cancel", reason: "enough", at: T + 77 });
    expect(jobTimes(d.job(100))).toMatchObject({ ended_at_ms: T + 77 });
  });

  it("takes an ended job's start from its duration once rebuilt from storage (its start not kept)", () => {
    const rebuilt = {
      id: 1,
      status: "finished",
      attempt: 1,
      // A rebuild takes the record's end (seconds) as the last delivery's instant.
      delivery: { runnerId: 1, state: "acknowledged", at: T + 2_000 },
      durationMs: 1_250,
      endedAt: T + 2_000,
    } as unknown as JobState;
    expect(jobTimes(rebuilt)).toEqual({ started_at_ms: T + 750, ended_at_ms: T + 2_000, duration_ms: 1_250 });
    // Cancelled (no duration kept): its start is not known, rather than its end.
    const cancelled = { ...rebuilt, status: "error", durationMs: undefined } as unknown as JobState;
    expect(jobTimes(cancelled)).toEqual({ ended_at_ms: T + 2_000 });
  });
});
