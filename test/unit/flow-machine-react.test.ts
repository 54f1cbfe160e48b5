import { describe, expect, it } from "vitest";
import { jobEnvironment, nearestDeadline, waitKeyOf, type FlowEvent } from "../../shared/flow/index.js";
import { started, T, TIMEOUTS, jobIn, type Driver } from "./flow-sim.js";

// The flow machine's jobs that take no runner (waits for an event, sleeps) and its rules (when,
// needs, allow_failure, the flow's own deadline): each ends exactly once, whatever repeats or races.

const event = (job: number, key: string, extra: Partial<Extract<FlowEvent, { type: "event" }>> = {}): FlowEvent => ({
  type: "event",
  job,
  id: "e1",
  name: "order.paid",
  key,
  data: { amount: "12" },
  at: T + 10,
  ...extra,
});

const waitFor = (key: string, more: Record<string, unknown> = {}) => ({
  script: undefined,
  script_type: undefined,
  wait: { event: "order.paid", key, timeout: 60, ...more },
});

const deadlineOf = (d: Driver, job: number): FlowEvent => {
  const due = d.job(job).deadline;
  if (!due) throw new Error(`job ${job} has no deadline`);
  return { type: "deadline", job, attempt: due.attempt, kind: due.kind, at: due.at };
};

describe("a wait", () => {
  it("starts with its key resolved from the env and its dependencies' results, and takes no runner", () => {
    const d = started(
      [jobIn({ name: "order" }), jobIn({ name: "pay", depends: ["order"], ...waitFor("${DEP_ORDER_ID}-${SHOP}") })],
      {
        envVars: { SHOP: "north" },
      },
    );
    d.run(100, { result: { id: "42" } });
    expect(d.job(101)).toMatchObject({ status: "started", attempt: 1, waitKey: "42-north" });
    // Driver.run ends the order's attempt at 1,003 (its own clock): the wait starts then.
    expect(d.job(101).deadline).toMatchObject({ kind: "wait", at: 1_003 + 60_000 });
    expect(d.effects).toContainEqual({ type: "waitStarted", job: 101 });
    expect(d.effects.filter((e) => e.type === "dispatch").map((e) => "job" in e && e.job)).toEqual([100]);
  });

  it("finishes once with the event's data; a repeat is a duplicate, another key or name is stale", () => {
    const d = started([jobIn({ name: "pay", ...waitFor("42") })]);
    expect(d.send(event(100, "41")).outcome).toBe("stale");
    expect(d.send(event(100, "42", { name: "order.shipped" })).outcome).toBe("stale");
    const t = d.send(event(100, "42"));
    expect(t.outcome).toBe("applied");
    expect(d.job(100)).toMatchObject({ status: "finished", result: { amount: "12", event_id: "e1" } });
    expect(d.state.status).toBe("finished");
    expect(d.send(event(100, "42")).outcome).toBe("duplicate");
    expect(d.send(event(100, "42", { id: "e2" })).outcome).toBe("stale");
    expect(d.send({ type: "deadline", job: 100, attempt: 1, kind: "wait", at: T + 60_000 }).outcome).toBe("stale");
  });

  it("times out in error saying so, or is skipped with on_timeout: skip; an event after it changes nothing", () => {
    const d = started([jobIn({ name: "pay", ...waitFor("42") })]);
    const early = { ...(deadlineOf(d, 100) as Extract<FlowEvent, { type: "deadline" }>), at: T + 1 };
    expect(d.send(early).outcome).toBe("not-applicable");
    d.send(deadlineOf(d, 100));
    expect(d.job(100)).toMatchObject({
      status: "error",
      error: 'timed out: no event order.paid with key "42" came within 60 s',
    });
    expect(d.state.status).toBe("error");
    expect(d.send(event(100, "42")).outcome).toBe("stale");

    const s = started([
      jobIn({ name: "pay", ...waitFor("42", { on_timeout: "skip" }) }),
      jobIn({ name: "ship", depends: ["pay"] }),
      jobIn({ name: "remind", depends: ["pay"], needs: "all_done" }),
    ]);
    s.send(deadlineOf(s, 100));
    expect(s.statusOf([100, 101, 102])).toEqual(["skipped", "skipped", "dispatched"]);
    expect(s.job(101).skipReason).toBe("dependency pay was skipped (needs: all_finished)");
    s.run(102);
    expect(s.state.status).toBe("finished");
  });

  it("ends with a cancel, and an event after it is stale", () => {
    const d = started([jobIn({ name: "pay", ...waitFor("42") })]);
    d.send({ type: "cancel", reason: "customer left", at: T + 5 });
    expect(d.job(100)).toMatchObject({ status: "error", error: "cancelled: customer left" });
    expect(d.send(event(100, "42")).outcome).toBe("stale");
  });

  it("fails at once when its key names what is not set", () => {
    const d = started([jobIn({ name: "pay", ...waitFor("${ORDER}") })]);
    expect(d.job(100)).toMatchObject({
      status: "error",
      error: "its wait's key could not be resolved: ${ORDER} is not set",
    });
  });

  it("keeps its timeout through an outage (moved later), as runners' deadlines are", () => {
    const d = started([
      jobIn({ name: "pay", ...waitFor("42") }),
      jobIn({ name: "nap", script: undefined, script_type: undefined, sleep: 30 }),
    ]);
    const wait = d.job(100).deadline?.at as number;
    const sleep = d.job(101).deadline?.at as number;
    d.send({ type: "resumed", downFor: 5_000, at: T + 6_000 });
    expect(d.job(100).deadline?.at).toBe(wait + 5_000);
    expect(d.job(101).deadline?.at).toBe(sleep);
  });

  it("moves its timeout by the part of an outage after it started, not by an outage before its start", () => {
    const d = started([jobIn({ name: "pay", ...waitFor("42") })]);
    const wait = d.job(100).deadline?.at as number; // started at T
    // Storage away from T - 20 s to T - 2 s, charged by the batch that started the wait (or later):
    // the wait was not kept from any event.
    expect(d.send({ type: "resumed", downFor: 18_000, at: T + 1_000, until: T - 2_000 }).outcome).toBe("duplicate");
    expect(d.job(100).deadline?.at).toBe(wait);
    // Away from T - 3 s to T + 4 s: the 4 s after its start.
    d.send({ type: "resumed", downFor: 7_000, at: T + 9_000, until: T + 4_000 });
    expect(d.job(100).deadline?.at).toBe(wait + 4_000);
    // Away from T + 10 s to T + 15 s, all of it while it waited.
    d.send({ type: "resumed", downFor: 5_000, at: T + 30_000, until: T + 15_000 });
    expect(d.job(100).deadline?.at).toBe(wait + 9_000);
  });
});

describe("a wait read back from storage", () => {
  it("shows the key it waited for, resolved again from its dependencies' results", () => {
    const d = started([
      jobIn({ name: "order" }),
      jobIn({ name: "pay", depends: ["order"], ...waitFor("${DEP_ORDER_ID}") }),
    ]);
    d.run(100, { result: { id: "42" } });
    d.send(event(101, "42"));
    const { waitKey: _lost, ...rest } = d.job(101);
    const reread = { ...d.state, jobs: d.state.jobs.set(101, rest) };
    expect(waitKeyOf(reread, rest)).toBe("42");
    expect(waitKeyOf(reread, { ...rest, attempt: 0 })).toBe("${DEP_ORDER_ID}");
  });
});

describe("a sleep", () => {
  const sleepJob = (fields: Record<string, unknown>) => jobIn({ script: undefined, script_type: undefined, ...fields });

  it("ends on its deadline, not before, with when it slept until", () => {
    const d = started([sleepJob({ name: "nap", sleep: 90 }), jobIn({ name: "after", depends: ["nap"] })]);
    expect(d.job(100)).toMatchObject({ status: "started", deadline: { kind: "sleep", at: T + 90_000 } });
    expect(nearestDeadline(d.state)?.at).toBe(T + 90_000);
    expect(
      d.send({ ...(deadlineOf(d, 100) as Extract<FlowEvent, { type: "deadline" }>), at: T + 89_999 }).outcome,
    ).toBe("not-applicable");
    const due = deadlineOf(d, 100);
    d.send(due);
    expect(d.job(100)).toMatchObject({
      status: "finished",
      result: { slept_until: new Date(T + 90_000).toISOString() },
    });
    expect(d.send(due).outcome).toBe("stale");
    expect(d.job(101).status).toBe("dispatched");
  });

  it("sleeps until a time from a dependency's result, and fails on one that is not a time", () => {
    const d = started([
      jobIn({ name: "plan" }),
      sleepJob({ name: "nap", sleep_until: "${DEP_PLAN_AT}", depends: ["plan"] }),
    ]);
    d.run(100, { result: { at: "2023-11-14T22:15:00Z" } });
    expect(d.job(101).deadline).toMatchObject({ kind: "sleep", at: Date.parse("2023-11-14T22:15:00Z") });

    const bad = started([
      jobIn({ name: "plan" }),
      sleepJob({ name: "nap", sleep_until: "${DEP_PLAN_AT}", depends: ["plan"] }),
    ]);
    bad.run(100, { result: { at: "tomorrow" } });
    expect(bad.job(101)).toMatchObject({ status: "error", error: 'sleep_until is not an RFC 3339 time: "tomorrow"' });
  });

  it("in the past ends at once (its deadline is now)", () => {
    const d = started([sleepJob({ name: "nap", sleep_until: "2001-01-01T00:00:00Z" })]);
    expect(d.job(100).deadline?.at).toBe(T);
  });

  it("that would end past the flow's deadline fails at its start, saying so (allowed, the flow goes on)", () => {
    const d = started(
      [
        jobIn({ name: "slow" }),
        sleepJob({ name: "nap", sleep: 90, depends: ["slow"], allow_failure: true }),
        jobIn({ name: "after", depends: ["nap"], needs: "all_done" }),
      ],
      { timeouts: { ...TIMEOUTS, flow: 120 } },
    );
    d.run(100, { at: T + 40_000 });
    expect(d.job(101)).toMatchObject({
      status: "error",
      error: "a sleep of 90 s from now would end past the flow's deadline (timeouts.flow: 120 s)",
    });
    expect(d.job(102).status).toBe("dispatched");
    // One that fits sleeps.
    const fits = started([jobIn({ name: "slow" }), sleepJob({ name: "nap", sleep: 90, depends: ["slow"] })], {
      timeouts: { ...TIMEOUTS, flow: 120 },
    });
    fits.run(100, { at: T + 20_000 });
    expect(fits.job(101)).toMatchObject({ status: "started", deadline: { kind: "sleep", at: T + 20_003 + 90_000 } });
  });
});

describe("the flow's deadline (timeouts.flow)", () => {
  it("counts from a re-run's start: a flow that failed on its deadline runs again after it", () => {
    const f = started([jobIn({ name: "pay", ...waitFor("42", { timeout: 60 }) })], {
      timeouts: { ...TIMEOUTS, flow: 120 },
    });
    f.send({ type: "deadline", job: 0, attempt: 0, kind: "flow", at: T + 120_000 });
    expect(f.state.status).toBe("error");
    const again = T + 500_000;
    f.send({ type: "rerun", bases: { 100: 2000 }, at: again });
    expect(f.state).toMatchObject({ status: "started", runStartedAt: again });
    expect(f.job(100)).toMatchObject({ status: "started", attempt: 2 });
    // The first run's deadline is gone; the re-run's is its start plus the limit.
    const old: FlowEvent = { type: "deadline", job: 0, attempt: 0, kind: "flow", at: again + 1 };
    expect(f.send(old).outcome).toBe("not-applicable");
    expect(nearestDeadline(f.state)).toMatchObject({ kind: "wait", at: again + 60_000 });
    f.send(event(100, "42", { at: again + 1_000 }));
    expect(f.state.status).toBe("finished");
  });

  it("ends the flow in error at its start plus the limit, stopping what runs", () => {
    const f = started([jobIn({ name: "a" })], { timeouts: { ...TIMEOUTS, flow: 120 } });
    expect(nearestDeadline(f.state)).toMatchObject({ kind: "flow", job: 0, at: T + 120_000 });
    const flowDue: FlowEvent = { type: "deadline", job: 0, attempt: 0, kind: "flow", at: T + 120_000 };
    expect(f.send({ ...flowDue, at: T + 119_000 } as FlowEvent).outcome).toBe("not-applicable");
    f.send(flowDue);
    expect(f.state).toMatchObject({
      status: "error",
      error: { job: 0, reason: "the flow ran past its deadline of 120 s (timeouts.flow)" },
    });
    expect(f.job(100).status).toBe("error");
    expect(f.send(flowDue).outcome).toBe("stale");
  });
});

describe("needs and allow_failure", () => {
  it("runs a clean-up (all_done) after a failure, and the flow ends in error only then", () => {
    const d = started([
      jobIn({ name: "work" }),
      jobIn({ name: "other" }),
      jobIn({ name: "next", depends: ["work"] }),
      jobIn({ name: "cleanup", depends: ["work", "other"], needs: "all_done" }),
    ]);
    d.run(100, { error: "exit 1" });
    expect(d.state.status).toBe("started");
    expect(d.state.error).toMatchObject({ name: "work" });
    expect(d.job(102)).toMatchObject({ status: "error", error: "not run: dependency work failed" });
    expect(d.job(103).status).toBe("waiting_for_prerequisites");
    d.run(101);
    expect(d.job(103).status).toBe("dispatched");
    d.run(103);
    expect(d.state).toMatchObject({ status: "error", error: { name: "work", reason: "exit 1" } });
    expect(d.effects.filter((e) => e.type === "flowEnded")).toHaveLength(1);
  });

  it("runs any_finished at the first finished dependency, and skips it when none finished", () => {
    const d = started([
      jobIn({ name: "a" }),
      jobIn({ name: "b" }),
      jobIn({ name: "c", depends: ["a", "b"], needs: "any_finished" }),
    ]);
    d.run(101);
    expect(d.job(102).status).toBe("dispatched");
    const n = started([
      jobIn({ name: "a", allow_failure: true }),
      jobIn({ name: "b", allow_failure: true }),
      jobIn({ name: "c", depends: ["a", "b"], needs: "any_finished" }),
    ]);
    n.run(100, { error: "x" });
    n.run(101, { error: "y" });
    expect(n.job(102)).toMatchObject({ status: "skipped", skipReason: "no dependency finished (needs: any_finished)" });
    expect(n.state.status).toBe("finished");
  });

  it("lets a failure that may happen (allow_failure) not fail the flow; dependents see its status", () => {
    const d = started([
      jobIn({ name: "lint", allow_failure: true }),
      jobIn({ name: "build" }),
      jobIn({ name: "strict", depends: ["lint"] }),
      jobIn({ name: "report", depends: ["lint", "build"], needs: "none_failed" }),
      jobIn({ name: "notify", depends: ["lint", "build"], needs: "all_done" }),
    ]);
    d.run(100, { error: "style" });
    d.run(101);
    expect(d.statusOf([102, 103, 104])).toEqual(["skipped", "skipped", "dispatched"]);
    expect(d.job(103).skipReason).toBe("dependency lint ended in error (needs: none_failed)");
    const env = jobEnvironment(d.state, d.job(104));
    expect(env).toMatchObject({ DEP_LINT_STATUS: "error", DEP_BUILD_STATUS: "finished" });
    d.run(104);
    expect(d.state.status).toBe("finished");
    expect(d.state.error).toBeUndefined();
    expect(d.effects).toContainEqual({ type: "deadLetter", job: 100, kind: "job", reason: "style" });
  });

  it("runs none_failed past skipped dependencies", () => {
    const d = started([
      jobIn({ name: "pay", ...waitFor("42", { on_timeout: "skip" }) }),
      jobIn({ name: "b" }),
      jobIn({ name: "c", depends: ["pay", "b"], needs: "none_failed" }),
    ]);
    d.send(deadlineOf(d, 100));
    d.run(101);
    expect(d.job(102).status).toBe("dispatched");
  });
});

describe("re-running a flow that failed", () => {
  it("runs a wait that timed out again, with what it skipped", () => {
    const d = started([
      jobIn({ name: "pay", ...waitFor("42") }),
      jobIn({ name: "ship", depends: ["pay"], needs: "none_failed" }),
    ]);
    d.send(deadlineOf(d, 100));
    expect(d.statusOf([100, 101])).toEqual(["error", "error"]);
    d.send({ type: "rerun", bases: { 100: 2000, 101: 2001 }, at: T + 100_000 });
    expect(d.job(100)).toMatchObject({ status: "started", attempt: 2, waitKey: "42" });
    d.send(event(100, "42", { at: T + 100_001 }));
    expect(d.job(101).status).toBe("dispatched");
  });
});
