import { describe, expect, it } from "vitest";
import { flowResult, messageId, messagesNeeded, nearestDeadline } from "../../shared/flow/index.js";
import { dispatched, Driver, flowOf, jobIn, resolved, started, T, TIMEOUTS } from "./flow-sim.js";

// The flow state machine when attempts go wrong: a job's failure and what it takes with it,
// retries and their backoff, and deadlines (delivery, ack, result) with what an outage does to them.

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
    expect(flowResult(d.state)).toEqual({ good: { ok: "1" } });
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
      "ack",
      // A push whose answer never came: taken as delivered, never sent again, and said why.
      (d: Driver) => (
        d.send({ type: "assigned", job: 100, attempt: 1, runner: 1, at: T + 1 }),
        d.send({
          type: "delivered",
          job: 100,
          attempt: 1,
          runner: 1,
          acknowledged: false,
          unconfirmed: "did not answer within 10 s",
          at: T + 2,
        }),
        d
      ),
      "was not acknowledged within 5 s: runner 1 did not answer within 10 s",
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
