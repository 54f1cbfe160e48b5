import { describe, expect, it } from "vitest";
import { apply, flowResult, jobEnvironment, type FlowEvent } from "../../shared/flow/index.js";
import { dispatched, Driver, flowOf, jobIn, started, T, type JobIn } from "./flow-sim.js";

// The flow state machine on its way to a result: dispatch order in every shape of DAG, one job's
// events, the events it refuses, and the environment a job runs with. Failures, retries and
// deadlines are in flow-machine-failure.test.ts; cancel and re-run in flow-machine-rerun.test.ts.

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
    expect(d.state).toMatchObject({ status: "finished", endedAt: T + 5 });
    expect(flowResult(d.state)).toEqual({ only: { answer: "42" } });
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
    expect(t.state.jobs.get(100)?.deadline).toEqual({ kind: "delivery", attempt: 1, at: T + 10_000 });
    const acked = apply(t.state, { type: "delivered", ...ev, acknowledged: true, at: T + 1 });
    expect(acked.state.jobs.get(100)?.deadline).toEqual({
      kind: "result",
      attempt: 1,
      at: T + 1 + 45_000,
      why: "silent",
    });
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
      DEP_FETCH_DATA_STATUS: "finished",
      DEP_9_STATUS: "finished",
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

describe("the state a transition makes", () => {
  it("holds every job, shares the ones it did not change with the state before, and leaves that state as it was", () => {
    const d = started(Array.from({ length: 50 }, (_, i) => jobIn({ name: `j${i}` })));
    const before = d.state;
    const was = JSON.stringify(before);
    d.run(120);
    const after = d.state;
    expect(after.jobs.ids()).toEqual(before.jobs.ids());
    expect(after.order).toEqual(before.order);
    for (const id of before.order) {
      if (id === 120) expect(after.jobs.get(id)).not.toBe(before.jobs.get(id));
      else expect(after.jobs.get(id)).toBe(before.jobs.get(id));
    }
    expect(after.jobs.get(120)?.status).toBe("finished");
    expect(JSON.stringify(before)).toBe(was);
  });
});
