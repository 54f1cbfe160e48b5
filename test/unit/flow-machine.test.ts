import { describe, expect, it } from "vitest";
import {
  apply,
  failedJobs,
  jobEnvironment,
  messageId,
  messagesNeeded,
  nearestDeadline,
  rerunBases,
  resultMessageId,
  type FlowEvent,
} from "../../shared/flow/index.js";
import { Driver, flowOf, jobIn, resolved, TIMEOUTS, type JobIn } from "./flow-sim.js";

const T = 1_700_000_000_000;

/** A started flow of these jobs (ids from 100 on, in order). */
function started(inputs: JobIn[], options: Parameters<typeof flowOf>[1] = {}): Driver {
  const d = new Driver(flowOf(inputs, options));
  d.send({ type: "start", at: T });
  return d;
}

const dispatched = (d: Driver): number[] => [...d.dispatches.keys()];

describe("shapes", () => {
  it("runs a chain one job after the other", () => {
    const d = started([
      jobIn({ name: "a" }),
      jobIn({ name: "b", depends: ["a"] }),
      jobIn({ name: "c", depends: ["b"] }),
    ]);
    expect(d.statusOf([100, 101, 102])).toEqual([
      "dispatched",
      "waiting_for_prerequisites",
      "waiting_for_prerequisites",
    ]);
    expect(d.run(100).effects).toEqual([
      { type: "jobEnded", job: 100 },
      { type: "dispatch", job: 101, attempt: 1 },
    ]);
    expect(d.run(101).effects).toEqual([
      { type: "jobEnded", job: 101 },
      { type: "dispatch", job: 102, attempt: 1 },
    ]);
    expect(d.state.status).toBe("started");
    expect(d.run(102).effects).toEqual([{ type: "jobEnded", job: 102 }, { type: "flowEnded" }]);
    expect(d.state.status).toBe("finished");
    expect(dispatched(d)).toEqual([100, 101, 102]);
  });

  it("fans out: every child is dispatched by the transition that finishes the parent", () => {
    const d = started([jobIn({ name: "root" }), ...["x", "y", "z"].map((name) => jobIn({ name, depends: ["root"] }))]);
    expect(dispatched(d)).toEqual([100]);
    const t = d.run(100);
    expect(t.effects.filter((e) => e.type === "dispatch").map((e) => e.type === "dispatch" && e.job)).toEqual([
      101, 102, 103,
    ]);
  });

  it("fans in: the sink waits for the last of its parents, in any order", () => {
    const d = started([
      jobIn({ name: "x" }),
      jobIn({ name: "y" }),
      jobIn({ name: "z" }),
      jobIn({ name: "sink", depends: ["x", "y", "z"] }),
    ]);
    expect(dispatched(d)).toEqual([100, 101, 102]);
    d.run(102);
    d.run(100);
    expect(d.job(103).status).toBe("waiting_for_prerequisites");
    expect(d.run(101).effects).toContainEqual({ type: "dispatch", job: 103, attempt: 1 });
  });

  it("runs the bottom of a diamond once, after both sides", () => {
    const d = started([
      jobIn({ name: "top" }),
      jobIn({ name: "l", depends: ["top"] }),
      jobIn({ name: "r", depends: ["top"] }),
      jobIn({ name: "bottom", depends: ["l", "r"] }),
    ]);
    d.run(100);
    d.run(101);
    expect(d.job(103).status).toBe("waiting_for_prerequisites");
    d.run(102);
    d.run(103);
    expect(d.state.status).toBe("finished");
    expect([...d.dispatches.values()]).toEqual([1, 1, 1, 1]);
  });

  it("runs a child of several parents once, after all of them", () => {
    // p and q each have a child of their own; c is a child of p, q and of p's child.
    const d = started([
      jobIn({ name: "p" }),
      jobIn({ name: "q" }),
      jobIn({ name: "pc", depends: ["p"] }),
      jobIn({ name: "qc", depends: ["q"] }),
      jobIn({ name: "c", depends: ["p", "q", "pc"] }),
    ]);
    d.run(100);
    d.run(102);
    expect(d.job(104).status).toBe("waiting_for_prerequisites");
    d.run(101);
    expect(d.job(104).status).toBe("dispatched");
    d.run(104);
    expect(d.state.status).toBe("started");
    d.run(103);
    expect(d.state.status).toBe("finished");
    expect([...d.dispatches.values()].every((n) => n === 1)).toBe(true);
  });
});

describe("one job's events", () => {
  const one = (fields: Partial<JobIn> = {}) => started([jobIn({ name: "only", timeout: 30, ...fields })]);
  const ev = { job: 100, attempt: 1, runner: 4 };

  it("takes the push path: assigned, delivered and acknowledged, started, heartbeat, finished", () => {
    const d = new Driver(flowOf([jobIn({ name: "only", timeout: 30 })]));
    expect(d.state.status).toBe("dispatched");
    expect(d.job(100)).toMatchObject({ status: "dispatched", attempt: 0 });
    expect(d.send({ type: "start", at: T }).effects).toEqual([
      { type: "flowStarted" },
      { type: "dispatch", job: 100, attempt: 1 },
    ]);
    expect(d.state).toMatchObject({ status: "started", startedAt: T });
    expect(d.job(100)).toMatchObject({
      status: "dispatched",
      attempt: 1,
      deadline: { kind: "delivery", attempt: 1, at: T + 300_000 },
    });
    expect(d.send({ type: "assigned", ...ev, at: T + 1 }).effects).toEqual([]);
    expect(d.job(100).delivery).toEqual({ runnerId: 4, state: "assigned", at: T + 1 });
    d.send({ type: "delivered", ...ev, acknowledged: true, at: T + 2 });
    expect(d.job(100)).toMatchObject({
      delivery: { state: "acknowledged", at: T + 2 },
      deadline: { kind: "result", at: T + 2 + 90_000 },
    });
    d.send({ type: "started", ...ev, at: T + 3 });
    expect(d.job(100)).toMatchObject({
      status: "started",
      startedAt: T + 3,
      deadline: { kind: "result", at: T + 3 + 90_000 },
    });
    expect(d.send({ type: "heartbeat", ...ev, at: T + 4 }).outcome).toBe("applied");
    expect(d.job(100).heartbeatAt).toBe(T + 4);
    const t = d.send({ type: "finished", ...ev, result: { answer: "42" }, at: T + 5 });
    expect(t.effects).toEqual([{ type: "jobEnded", job: 100 }, { type: "flowEnded" }]);
    expect(d.job(100)).toMatchObject({ status: "finished", result: { answer: "42" } });
    expect(d.job(100).deadline).toBeUndefined();
    expect(d.state).toMatchObject({ status: "finished", endedAt: T + 5, result: { only: { answer: "42" } } });
  });

  it("takes the pull path: delivered without acknowledgement, then acknowledged", () => {
    const d = one();
    d.send({ type: "assigned", ...ev, at: T + 1 });
    d.send({ type: "delivered", ...ev, acknowledged: false, at: T + 2 });
    expect(d.job(100)).toMatchObject({
      status: "dispatched",
      delivery: { state: "delivered" },
      deadline: { kind: "ack", at: T + 2 + 60_000 },
    });
    d.send({ type: "acknowledged", ...ev, at: T + 3 });
    expect(d.job(100)).toMatchObject({
      delivery: { state: "acknowledged", at: T + 3 },
      deadline: { kind: "result", at: T + 3 + 90_000 },
    });
    expect(d.send({ type: "acknowledged", ...ev, at: T + 4 }).outcome).toBe("duplicate");
  });

  it("uses the flow's timeout_result when it has one", () => {
    const flow = flowOf([jobIn({ timeout: 30 })], { timeouts: { timeout: 10, timeout_ack: 5, timeout_result: 45 } });
    const t = apply(apply(flow, { type: "start", at: T }).state, { type: "assigned", ...ev, at: T });
    expect(t.state.jobs[100]?.deadline).toEqual({ kind: "delivery", attempt: 1, at: T + 10_000 });
    const acked = apply(t.state, { type: "delivered", ...ev, acknowledged: true, at: T + 1 });
    expect(acked.state.jobs[100]?.deadline).toEqual({ kind: "result", attempt: 1, at: T + 1 + 45_000, why: "silent" });
  });

  it("takes started and finished that overtook delivered, and refuses what comes late", () => {
    const d = one();
    d.send({ type: "assigned", ...ev, at: T + 1 });
    expect(d.send({ type: "started", ...ev, at: T + 3 }).outcome).toBe("applied");
    expect(d.send({ type: "delivered", ...ev, acknowledged: true, at: T + 2 }).outcome).toBe("duplicate");
    expect(d.send({ type: "finished", ...ev, result: {}, at: T + 5 }).outcome).toBe("applied");
    expect(d.send({ type: "started", ...ev, at: T + 4 }).outcome).toBe("stale");
    expect(d.send({ type: "heartbeat", ...ev, at: T + 4 }).outcome).toBe("stale");
    expect(d.send({ type: "assigned", ...ev, at: T + 1 }).outcome).toBe("duplicate");
    expect(d.send({ type: "assigned", ...ev, runner: 5, at: T + 1 }).outcome).toBe("wrong-runner");
    expect(d.send({ type: "failed", ...ev, error: "late", at: T + 6 }).outcome).toBe("stale");
    expect(d.state.status).toBe("finished");
  });

  it("refuses a heartbeat older than the one it has", () => {
    const d = one();
    d.send({ type: "assigned", ...ev, at: T + 1 });
    d.send({ type: "heartbeat", ...ev, at: T + 10 });
    expect(d.send({ type: "heartbeat", ...ev, at: T + 10 }).outcome).toBe("duplicate");
    expect(d.send({ type: "heartbeat", ...ev, at: T + 5 }).outcome).not.toBe("applied");
    expect(d.job(100).heartbeatAt).toBe(T + 10);
  });
});

describe("outcomes of events that do not fit", () => {
  const ev = { job: 100, attempt: 1, runner: 1 };
  const refusals: [string, string, (d: Driver) => FlowEvent][] = [
    ["a second start", "duplicate", () => ({ type: "start", at: T + 9 })],
    ["a replayed assigned", "duplicate", () => ({ type: "assigned", ...ev, at: T + 1 })],
    ["a replayed delivered", "duplicate", () => ({ type: "delivered", ...ev, acknowledged: true, at: T + 1 })],
    ["a replayed started", "duplicate", () => ({ type: "started", ...ev, at: T + 2 })],
    ["an older attempt", "stale", () => ({ type: "started", ...ev, attempt: 0, at: T + 9 })],
    ["a later attempt", "stale", () => ({ type: "heartbeat", ...ev, attempt: 2, at: T + 9 })],
    ["another runner's assigned", "wrong-runner", () => ({ type: "assigned", ...ev, runner: 2, at: T + 9 })],
    ["another runner's result", "wrong-runner", () => ({ type: "finished", ...ev, runner: 2, result: {}, at: T + 9 })],
    ["another runner's failure", "wrong-runner", () => ({ type: "failed", ...ev, runner: 2, error: "x", at: T + 9 })],
    ["an unknown job", "not-applicable", () => ({ type: "finished", ...ev, job: 999, result: {}, at: T + 9 })],
    [
      "a deadline not yet due",
      "not-applicable",
      (d) => ({ type: "deadline", job: 100, attempt: 1, kind: "result", at: (d.job(100).deadline?.at ?? 0) - 1 }),
    ],
    [
      "a deadline of another kind",
      "stale",
      () => ({ type: "deadline", job: 100, attempt: 1, kind: "ack", at: T + 10_000_000 }),
    ],
    [
      "a deadline of an unknown job",
      "stale",
      () => ({ type: "deadline", job: 5, attempt: 1, kind: "ack", at: T + 10_000_000 }),
    ],
  ];

  it.each(refusals)("%s is %s: the very same state and no effects", (_, outcome, make) => {
    const d = started([jobIn({ name: "a" }), jobIn({ name: "b", depends: ["a"] })]);
    d.send({ type: "assigned", ...ev, at: T + 1 });
    d.send({ type: "delivered", ...ev, acknowledged: true, at: T + 1 });
    d.send({ type: "started", ...ev, at: T + 2 });
    const before = d.state;
    const t = apply(before, make(d));
    expect(t.outcome).toBe(outcome);
    expect(t.state).toBe(before);
    expect(t.effects).toEqual([]);
    expect(t.reason).toEqual(expect.any(String));
  });

  it("refuses a replayed finished as a duplicate, with the same state", () => {
    const d = started([jobIn({ name: "a" }), jobIn({ name: "b" })]);
    d.run(100);
    const before = d.state;
    const t = apply(before, { type: "finished", ...ev, result: { out: "100" }, at: T + 9 });
    expect([t.outcome, t.state === before, t.effects]).toEqual(["duplicate", true, []]);
  });

  it("refuses job events before the flow starts, and any event for a job that never ran", () => {
    const flow = flowOf([jobIn({ name: "a" })]);
    expect(apply(flow, { type: "assigned", ...ev, at: T }).outcome).toBe("stale");
    const early = apply(flow, { type: "started", ...ev, attempt: 0, at: T });
    expect([early.outcome, early.state === flow, early.effects]).toEqual(["wrong-runner", true, []]);
  });
});

describe("failure", () => {
  const shape = [
    jobIn({ name: "bad" }),
    jobIn({ name: "good" }),
    jobIn({ name: "child", depends: ["bad"] }),
    jobIn({ name: "grandchild", depends: ["child", "good"] }),
    jobIn({ name: "after_good", depends: ["good"] }),
  ];

  it("errors the flow, its dependents transitively, and lets a running branch finish", () => {
    const d = started(shape);
    const ev = { job: 101, attempt: 1, runner: 1 };
    d.send({ type: "assigned", ...ev, at: T + 1 });
    d.send({ type: "started", ...ev, at: T + 2 });
    const t = d.run(100, { error: "exit 3", at: T + 3 });
    expect(t.effects).toContainEqual({ type: "jobEnded", job: 100 });
    expect(t.effects).toContainEqual({ type: "jobEnded", job: 102 });
    expect(t.effects).toContainEqual({ type: "jobEnded", job: 103 });
    expect(t.effects.filter((e) => e.type === "flowEnded")).toHaveLength(1);
    expect(d.state).toMatchObject({
      status: "error",
      endedAt: T + 6,
      error: { job: 100, name: "bad", reason: "exit 3" },
    });
    expect(d.job(100)).toMatchObject({ status: "error", error: "exit 3" });
    for (const id of [102, 103])
      expect(d.job(id)).toMatchObject({ status: "error", error: "not run: dependency bad failed" });

    const done = d.send({ type: "finished", ...ev, result: { ok: "1" }, at: T + 7 });
    expect(done.outcome).toBe("applied");
    expect(done.effects).toEqual([{ type: "jobEnded", job: 101 }]);
    expect(d.state.result).toEqual({ good: { ok: "1" } });
    expect(d.state.status).toBe("error");
    expect(dispatched(d)).toEqual([100, 101]);
    // Nothing is left waiting in a flow that failed.
    expect(d.job(104)).toMatchObject({ status: "error", error: expect.stringContaining("not run") });
  });

  it("names an unnamed job's error by id only", () => {
    const d = started([jobIn(), jobIn()]);
    d.run(101, { error: "boom" });
    expect(d.state.error).toEqual({ job: 101, reason: "boom" });
    expect(d.send({ type: "failed", job: 101, attempt: 1, runner: 1, error: "boom", at: T }).outcome).toBe("duplicate");
    expect(d.send({ type: "finished", job: 101, attempt: 1, runner: 1, result: {}, at: T }).outcome).toBe("stale");
    d.run(100, { error: "second" });
    expect(d.state.error).toEqual({ job: 101, reason: "boom" });
    expect(d.effects.filter((e) => e.type === "flowEnded")).toHaveLength(1);
  });

  it("waits a backoff exponential in the attempts, with full jitter, capped", () => {
    const d = started([jobIn({ name: "flaky", retries: 4 })], {
      timeouts: { ...TIMEOUTS, retry_base_ms: 1_000, retry_cap_ms: 3_000 },
    });
    // The jitter is the event's `random`: the backoff is floor(random * min(cap, base * 2^(n-1))).
    const backoffs = [0.5, 0.5, 0.999, 0].map((random, i) => {
      const at = T + 10_000 * (i + 1);
      const common = { job: 100, attempt: i + 1, runner: 1 };
      d.send({ type: "assigned", ...common, at });
      d.send({ type: "delivered", ...common, acknowledged: true, at });
      d.send({ type: "failed", ...common, error: "boom", at, random });
      const due = d.job(100).deadline;
      expect(due?.kind).toBe("retry");
      d.send({ type: "deadline", job: 100, attempt: i + 1, kind: "retry", at: due?.at ?? 0 });
      expect(d.job(100).attempt).toBe(i + 2);
      return (due?.at ?? 0) - at;
    });
    expect(backoffs).toEqual([500, 1_000, 2_997, 0]);
  });

  it("retries a job that has retries left after a backoff, as a new attempt with its own message", () => {
    const d = started([jobIn({ name: "flaky", retries: 2 }), jobIn({ name: "next", depends: ["flaky"] })]);
    expect(d.run(100, { error: "first" }).effects).toEqual([{ type: "attemptFailed", job: 100, attempt: 1 }]);
    const backoff = d.job(100).deadline;
    expect(d.job(100)).toMatchObject({ status: "dispatched", attempt: 1, previousRunner: 1, error: "first" });
    expect(backoff?.kind).toBe("retry");
    expect(d.state.status).toBe("started");
    expect(d.send({ type: "finished", job: 100, attempt: 1, runner: 1, result: {}, at: T }).outcome).toBe("stale");
    expect(d.send({ type: "deadline", job: 100, attempt: 1, kind: "retry", at: (backoff?.at ?? 0) - 1 }).outcome).toBe(
      "not-applicable",
    );
    expect(d.send({ type: "deadline", job: 100, attempt: 1, kind: "retry", at: backoff?.at ?? 0 }).effects).toEqual([
      { type: "dispatch", job: 100, attempt: 2 },
    ]);
    const deadline = d.job(100).deadline;
    d.send({ type: "deadline", job: 100, attempt: 2, kind: "delivery", at: deadline?.at ?? 0 });
    const second = d.job(100).deadline;
    d.send({ type: "deadline", job: 100, attempt: 2, kind: "retry", at: second?.at ?? 0 });
    expect(d.job(100).attempt).toBe(3);
    expect(messageId(d.job(100), 3)).toBe(1002);
    expect(messageId(d.job(101), 1)).toBe(1003);
    d.run(100, { error: "third" });
    expect(d.state).toMatchObject({ status: "error", error: { job: 100, reason: "third" } });
    expect(d.dispatches.get(100)).toBe(3);
    expect(d.dispatches.get(101)).toBeUndefined();
  });

  it("reserves a message id for every attempt of every job", () => {
    // Every attempt of every job, and the flow's result message.
    expect(messagesNeeded(resolved([jobIn({ retries: 2 }), jobIn(), jobIn({ retries: 1 })]))).toBe(7);
  });
});

describe("deadlines", () => {
  it("names the nearest pending deadline", () => {
    const flow = flowOf([jobIn({ name: "a", timeout: 30 }), jobIn({ name: "b" })], {
      timeouts: { timeout: 20, timeout_ack: 5 },
    });
    expect(nearestDeadline(flow)).toBeUndefined();
    const d = new Driver(flow);
    d.send({ type: "start", at: T });
    expect(nearestDeadline(d.state)).toEqual({ kind: "delivery", attempt: 1, at: T + 20_000, job: 100 });
    d.send({ type: "assigned", job: 101, attempt: 1, runner: 1, at: T + 1 });
    d.send({ type: "delivered", job: 101, attempt: 1, runner: 1, acknowledged: false, at: T + 1_000 });
    expect(nearestDeadline(d.state)).toEqual({ kind: "ack", attempt: 1, at: T + 6_000, job: 101 });
    d.run(101);
    expect(nearestDeadline(d.state)).toMatchObject({ job: 100, kind: "delivery" });
    d.run(100);
    expect(nearestDeadline(d.state)).toBeUndefined();
  });

  it.each([
    ["delivery", (d: Driver) => d, "was not delivered to a runner within 20 s"],
    [
      "ack",
      (d: Driver) => (
        d.send({ type: "assigned", job: 100, attempt: 1, runner: 1, at: T + 1 }),
        d.send({ type: "delivered", job: 100, attempt: 1, runner: 1, acknowledged: false, at: T + 2 }),
        d
      ),
      "was not acknowledged within 5 s",
    ],
    [
      "result",
      (d: Driver) => (
        d.send({ type: "assigned", job: 100, attempt: 1, runner: 1, at: T + 1 }),
        d.send({ type: "delivered", job: 100, attempt: 1, runner: 1, acknowledged: true, at: T + 2 }),
        d.send({ type: "started", job: 100, attempt: 1, runner: 1, at: T + 9_000 }),
        d
      ),
      "ran past its timeout of 30 s",
    ],
  ] as const)("fails the job when its %s deadline passes", (kind, prepare, reason) => {
    const d = prepare(
      started([jobIn({ name: "a", timeout: 30 }), jobIn({ name: "b", depends: ["a"] })], {
        timeouts: { timeout: 20, timeout_ack: 5 },
      }),
    );
    const due = d.job(100).deadline;
    expect(due?.kind).toBe(kind);
    const early = d.send({ type: "deadline", job: 100, attempt: 1, kind, at: (due?.at ?? 0) - 1 });
    expect(early.outcome).toBe("not-applicable");
    const t = d.send({ type: "deadline", job: 100, attempt: 1, kind, at: due?.at ?? 0 });
    expect(t.outcome).toBe("applied");
    expect(d.job(100)).toMatchObject({ status: "error", error: `attempt 1 ${reason}` });
    expect(d.state).toMatchObject({ status: "error", error: { job: 100, name: "a", reason: `attempt 1 ${reason}` } });
    expect(d.job(101).status).toBe("error");
    expect(d.send({ type: "deadline", job: 100, attempt: 1, kind, at: due?.at ?? 0 }).outcome).toBe("stale");
  });

  it("says why an attempt was not delivered: how the runner last answered, else the reason the shell gives", () => {
    const d = started([jobIn({ name: "a" }), jobIn({ name: "b" })], { timeouts: { timeout: 20, timeout_ack: 5 } });
    d.send({ type: "assigned", job: 100, attempt: 1, runner: 7, at: T + 1 });
    d.send({
      type: "unassigned",
      job: 100,
      attempt: 1,
      runner: 7,
      reason: "answered 503 Service Unavailable",
      at: T + 2,
    });
    d.send({
      type: "deadline",
      job: 100,
      attempt: 1,
      kind: "delivery",
      at: T + 20_000,
      why: "every runner is at its concurrency",
    });
    expect(d.job(100).error).toBe(
      "attempt 1 was not delivered to a runner within 20 s: runner 7 answered 503 Service Unavailable",
    );
    const e = started([jobIn({ name: "a" })], { timeouts: { timeout: 20, timeout_ack: 5 } });
    e.send({
      type: "deadline",
      job: 100,
      attempt: 1,
      kind: "delivery",
      at: T + 20_000,
      why: "no runner of script type sh is registered",
    });
    expect(e.job(100).error).toBe(
      "attempt 1 was not delivered to a runner within 20 s: no runner of script type sh is registered",
    );
  });

  it("does not charge an outage to runners: resumed moves every pending deadline but a retry's backoff", () => {
    const d = started([jobIn({ name: "a", timeout: 30 }), jobIn({ name: "b" }), jobIn({ name: "c", retries: 1 })], {
      timeouts: { timeout: 20, timeout_ack: 5, timeout_result: 45 },
    });
    d.send({ type: "assigned", job: 100, attempt: 1, runner: 1, at: T + 1 });
    d.send({ type: "delivered", job: 100, attempt: 1, runner: 1, acknowledged: true, at: T + 2 });
    d.send({ type: "assigned", job: 102, attempt: 1, runner: 1, at: T + 1 });
    d.send({ type: "delivered", job: 102, attempt: 1, runner: 1, acknowledged: true, at: T + 2 });
    d.send({ type: "failed", job: 102, attempt: 1, runner: 1, error: "boom", at: T + 3, random: 0.5 });
    const before = [100, 101, 102].map((id) => d.job(id).deadline);
    expect(before.map((due) => due?.kind)).toEqual(["result", "delivery", "retry"]);
    expect(d.send({ type: "resumed", downFor: 15_000, at: T + 20_000 }).outcome).toBe("applied");
    expect([100, 101, 102].map((id) => d.job(id).deadline?.at)).toEqual([
      (before[0]?.at ?? 0) + 15_000,
      (before[1]?.at ?? 0) + 15_000,
      before[2]?.at,
    ]);
    expect(d.send({ type: "resumed", downFor: 0, at: T + 20_000 }).outcome).toBe("duplicate");
  });

  it("names the flow's timeout_result when a result is late", () => {
    const d = started([jobIn({ name: "a", timeout: 30 })], {
      timeouts: { timeout: 20, timeout_ack: 5, timeout_result: 45 },
    });
    d.send({ type: "assigned", job: 100, attempt: 1, runner: 1, at: T + 1 });
    d.send({ type: "acknowledged", job: 100, attempt: 1, runner: 1, at: T + 2 });
    d.send({ type: "started", job: 100, attempt: 1, runner: 1, at: T + 3_000 });
    d.send({ type: "deadline", job: 100, attempt: 1, kind: "result", at: T + 3_000 + 45_000 });
    expect(d.job(100).error).toBe("attempt 1 went silent: no result, heartbeat or log for 45 s");
  });
});

describe("cancel", () => {
  it("ends every job not yet ended and the flow, once", () => {
    const d = started([jobIn({ name: "a" }), jobIn({ name: "b" }), jobIn({ name: "c", depends: ["a", "b"] })]);
    d.run(100);
    const t = d.send({ type: "cancel", reason: "operator", at: T + 50 });
    expect(t.effects).toEqual([{ type: "jobEnded", job: 101 }, { type: "jobEnded", job: 102 }, { type: "flowEnded" }]);
    expect(d.state).toMatchObject({
      status: "error",
      endedAt: T + 50,
      error: { job: 0, reason: "cancelled: operator" },
    });
    expect(d.statusOf([100, 101, 102])).toEqual(["finished", "error", "error"]);
    expect(d.job(101)).toMatchObject({ error: "cancelled: operator" });
    expect(d.job(101).deadline).toBeUndefined();
    expect(nearestDeadline(d.state)).toBeUndefined();
    expect(d.send({ type: "cancel", reason: "again", at: T + 51 }).outcome).toBe("duplicate");
    expect(d.send({ type: "assigned", job: 101, attempt: 1, runner: 1, at: T + 52 }).outcome).toBe("stale");
  });

  it("cancels a flow that never started", () => {
    const d = new Driver(flowOf([jobIn()]));
    expect(d.send({ type: "cancel", reason: "no", at: T }).outcome).toBe("applied");
    expect(d.state.status).toBe("error");
    expect(d.send({ type: "start", at: T }).outcome).toBe("duplicate");
    expect(d.dispatches.size).toBe(0);
  });
});

describe("re-run", () => {
  /** A failed flow's re-run with the ids a coordinator would allocate after `firstFree`. */
  function rerunFrom(d: Driver, firstFree: number) {
    const failed = failedJobs(d.state);
    const needed = messagesNeeded(failed.map((id) => d.job(id).spec));
    return { failed, needed, t: d.send({ type: "rerun", bases: rerunBases(d.state, firstFree), at: T + 100 }) };
  }

  it("runs the failed jobs again from a fresh block of ids; finished jobs keep their results", () => {
    const d = started([
      jobIn({ name: "ok" }),
      jobIn({ name: "bad", retries: 1 }),
      jobIn({ name: "after", depends: ["bad"] }),
    ]);
    // Blocks from 1000: ok 1000, bad 1001-1002, after 1003, the result 1004.
    d.run(100, { result: { v: "1" } });
    d.run(101, { error: "first" });
    d.send({ type: "deadline", job: 101, attempt: 1, kind: "retry", at: d.job(101).deadline?.at ?? 0 });
    d.run(101, { error: "second" });
    expect(d.state.status).toBe("error");
    expect(resultMessageId(d.state)).toBe(1004);

    const { failed, needed, t } = rerunFrom(d, 1005);
    expect(failed).toEqual([101, 102]);
    expect(needed).toBe(4); // bad 2 attempts, after 1, a new result message
    expect(t.outcome).toBe("applied");
    expect(t.effects).toEqual([
      { type: "flowRerun", jobs: [101, 102] },
      { type: "dispatch", job: 101, attempt: 3 },
    ]);
    expect(d.statusOf([100, 101, 102])).toEqual(["finished", "dispatched", "waiting_for_prerequisites"]);
    expect(d.state.result).toEqual({ ok: { v: "1" } });
    // Attempt numbers go on; the attempt's message is the first id of the fresh block.
    expect(messageId(d.job(101), 3)).toBe(1005);
    d.run(101);
    expect(messageId(d.job(102), 1)).toBe(1007);
    d.run(102);
    expect(d.state.status).toBe("finished");
    // The result message takes the id after the re-run's blocks, never an attempt's.
    expect(resultMessageId(d.state)).toBe(1008);
  });

  it("gives the result message its own id when the re-run job's block ends last", () => {
    const d = started([jobIn({ name: "only" })]);
    d.run(100, { error: "boom" });
    expect(resultMessageId(d.state)).toBe(1001);
    rerunFrom(d, 1002);
    expect(messageId(d.job(100), 2)).toBe(1002);
    d.run(100);
    expect(resultMessageId(d.state)).toBe(1003);
  });

  it("re-runs only a failed flow, and only with ids for every failed job", () => {
    const d = started([jobIn({ name: "a" })]);
    expect(d.send({ type: "rerun", bases: { 100: 2000 }, at: T }).outcome).toBe("not-applicable");
    d.run(100, { error: "boom" });
    expect(d.send({ type: "rerun", bases: {}, at: T }).outcome).toBe("not-applicable");
    expect(d.state.status).toBe("error");
  });
});

describe("jobEnvironment", () => {
  it("merges flow and job env, adds the coordinator's variables and the dependencies' results", () => {
    const d = started(
      [
        jobIn({ name: "fetch-data", env_vars: { FLOW_ID: "mine" } }),
        jobIn({ id: 9 }),
        jobIn({ name: "use", env_vars: { SHARED: "job", OWN: "o", JOB_ID: "x" }, depends: ["fetch-data", 9] }),
        jobIn({ name: "far", depends: ["use"] }),
      ],
      { envVars: { SHARED: "flow", ONLY_FLOW: "f" } },
    );
    d.run(100, { result: { "out.path": "/tmp/a", n: "1" } });
    d.run(9, { result: { x: "y" } });
    expect(jobEnvironment(d.state, d.job(101))).toEqual({
      SHARED: "job",
      ONLY_FLOW: "f",
      OWN: "o",
      FLOW_ID: "7",
      CONTEXT_ID: "3",
      JOB_ID: "101",
      JOB_NAME: "use",
      JOB_ATTEMPT: "1",
      TRACE_ID: "0af7651916cd43dd8448eb211c80319c",
      FLOW_INPUTS: JSON.stringify({ "fetch-data": { "out.path": "/tmp/a", n: "1" }, "9": { x: "y" } }),
      DEP_FETCH_DATA_OUT_PATH: "/tmp/a",
      DEP_FETCH_DATA_N: "1",
      DEP_9_X: "y",
    });
    expect(jobEnvironment(d.state, d.job(9))).toEqual({
      SHARED: "flow",
      ONLY_FLOW: "f",
      FLOW_ID: "7",
      CONTEXT_ID: "3",
      JOB_ID: "9",
      JOB_ATTEMPT: "1",
      TRACE_ID: "0af7651916cd43dd8448eb211c80319c",
      FLOW_INPUTS: "{}",
    });
    d.run(101, { result: { r: "1" } });
    expect(jobEnvironment(d.state, d.job(102)).FLOW_INPUTS).toBe('{"use":{"r":"1"}}');
  });
});
