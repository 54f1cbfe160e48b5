import { describe, expect, it } from "vitest";
import { flowResult, jobEnvironment, rerunBases, rerunJobs } from "../../shared/flow/index.js";
import { changesOf } from "../../shared/flow/changes.js";
import { flowOf, jobIn, started, T } from "./flow-sim.js";
import { BOOK, CHARGE, failedAtShip, REFUND, SAGA, SHIP, UNBOOK, undo, UNSHIP } from "./saga-sim.js";

// Compensation (sagas): a job's `compensate` is a job of its own that runs only while the flow
// unwinds, in reverse dependency order, once the job it undoes finished.

describe("a saga's compensations", () => {
  it("are jobs of their own after the flow's jobs, waiting on the compensations of their dependents", () => {
    const state = flowOf(SAGA);
    expect(state.order).toEqual([BOOK, CHARGE, SHIP, UNBOOK, REFUND, UNSHIP]);
    expect(state.jobs.get(UNBOOK)).toMatchObject({
      name: "book.compensate",
      depends: [REFUND],
      spec: { compensates: BOOK },
    });
    expect(state.jobs.get(REFUND)).toMatchObject({ name: "charge.compensate", depends: [UNSHIP] });
    expect(state.jobs.get(REFUND)?.spec).toMatchObject({ retries: 1, script: "echo undo charge", compensates: CHARGE });
    expect(state.jobs.get(UNSHIP)?.depends).toEqual([]);
    expect(state.jobs.get(BOOK)?.compensation).toBe(UNBOOK);
    // Each has its own block of message ids: charge's compensation two (its retry).
    expect([UNBOOK, REFUND, UNSHIP].map((id) => state.jobs.get(id)?.messageBase)).toEqual([1003, 1004, 1006]);
  });

  it("never run in a flow that finishes: skipped as not needed when it ends", () => {
    const d = started(SAGA);
    expect(d.statusOf([UNBOOK, REFUND, UNSHIP])).toEqual(Array(3).fill("waiting_for_prerequisites"));
    d.run(BOOK);
    d.run(CHARGE);
    const end = d.run(SHIP);
    expect(d.state.status).toBe("finished");
    expect(end.effects.filter((e) => e.type === "jobEnded").map((e) => "job" in e && e.job)).toEqual([
      SHIP,
      UNBOOK,
      REFUND,
      UNSHIP,
    ]);
    expect(d.job(UNBOOK)).toMatchObject({ status: "skipped", skipReason: "not needed: the flow finished" });
    expect([...d.dispatches.keys()]).toEqual([BOOK, CHARGE, SHIP]);
  });

  it("unwind a failure in reverse order: charge's compensation, then book's; ship's is skipped", () => {
    const d = failedAtShip();
    const failure = d.run(SHIP, { error: "out of stock" });
    expect(failure.effects).toEqual([
      { type: "jobEnded", job: SHIP },
      { type: "deadLetter", job: SHIP, kind: "job", reason: "out of stock" },
      { type: "flowCompensating" },
      { type: "jobEnded", job: UNSHIP },
      { type: "dispatch", job: REFUND, attempt: 1 },
    ]);
    expect(d.state).toMatchObject({ status: "compensating", compensatingAt: 1_003 });
    expect(d.state.endedAt).toBeUndefined();
    expect(d.job(UNSHIP).skipReason).toBe("nothing to undo: ship did not finish (it is error)");
    expect(d.job(UNBOOK).status).toBe("waiting_for_prerequisites");

    // The compensation is told what it undoes.
    expect(jobEnvironment(d.state, d.job(REFUND))).toMatchObject({
      COMPENSATE_JOB: "charge",
      COMPENSATE_RESULT: JSON.stringify({ payment: "P-9", amount: "12.50" }),
      COMPENSATE_PAYMENT: "P-9",
      COMPENSATE_AMOUNT: "12.50",
      DEP_CHARGE_PAYMENT: "P-9",
      FLOW_INPUTS: JSON.stringify({ charge: { payment: "P-9", amount: "12.50" } }),
    });

    expect(d.run(REFUND, { result: { refund: "R-1" } }).effects).toEqual([
      { type: "jobEnded", job: REFUND },
      { type: "dispatch", job: UNBOOK, attempt: 1 },
    ]);
    const end = d.run(UNBOOK);
    expect(end.effects).toEqual([{ type: "jobEnded", job: UNBOOK }, { type: "flowEnded" }]);
    expect(d.state).toMatchObject({
      status: "compensated",
      error: { job: SHIP, name: "ship", reason: "out of stock" },
    });
    expect(d.state.error?.failed_compensations).toBeUndefined();
    expect([...d.dispatches.keys()]).toEqual([BOOK, CHARGE, SHIP, REFUND, UNBOOK]);
    expect(flowResult(d.state)).toMatchObject({ "charge.compensate": { refund: "R-1" } });
  });

  it("tell the stream: flow.compensating, job events naming what they undo, flow.compensated", () => {
    const d = failedAtShip();
    const event = { type: "failed" as const, job: SHIP, attempt: 1, runner: 1, error: "no", at: T };
    d.send({ type: "assigned", job: SHIP, attempt: 1, runner: 1, at: T });
    const mid = d.state;
    const t = d.send(event);
    const changes = changesOf(mid, t, event);
    expect(changes.map((c) => c.type)).toEqual([
      "job.error",
      "job.dead_lettered",
      "flow.compensating",
      "job.skipped",
      "job.ready",
    ]);
    expect(changes[2]).toMatchObject({ status: "compensating", error: "no" });
    expect(changes[4]).toMatchObject({ job_id: REFUND, compensates: CHARGE });
    expect(changes[0]?.compensates).toBeUndefined();
    d.run(REFUND);
    const last = { type: "finished" as const, job: UNBOOK, attempt: 1, runner: 1, result: {}, at: T + 9 };
    d.send({ type: "assigned", job: UNBOOK, attempt: 1, runner: 1, at: T + 8 });
    const pre = d.state;
    const end = changesOf(pre, d.send(last), last);
    expect(end.map((c) => c.type)).toEqual(["job.finished", "flow.compensated"]);
  });

  it("run side by side when independent, and the shared one after both", () => {
    const d = started([
      jobIn({ name: "reserve", ...undo("reserve") }),
      jobIn({ name: "hotel", depends: ["reserve"], ...undo("hotel") }),
      jobIn({ name: "flight", depends: ["reserve"], ...undo("flight") }),
      jobIn({ name: "confirm", depends: ["hotel", "flight"] }),
    ]);
    // reserve 100, hotel 101, flight 102, confirm 103; compensations 104 (reserve), 105, 106.
    expect(d.job(104).depends).toEqual([105, 106]);
    d.run(100);
    d.run(101);
    d.run(102);
    const failed = d.run(103, { error: "declined" });
    const ready = failed.effects.filter((e) => e.type === "dispatch").map((e) => "job" in e && e.job);
    expect(ready).toEqual([105, 106]);
    d.run(106);
    expect(d.job(104).status).toBe("waiting_for_prerequisites");
    d.run(105);
    expect(d.job(104).status).toBe("dispatched");
    d.run(104);
    expect(d.state.status).toBe("compensated");
  });

  it("pass a wait through a job without one: the nearest compensations downstream", () => {
    const state = flowOf([
      jobIn({ name: "a", ...undo("a") }),
      jobIn({ name: "b", depends: ["a"] }),
      jobIn({ name: "c", depends: ["b"], ...undo("c") }),
      jobIn({ name: "d", depends: ["b"], ...undo("d") }),
      jobIn({ name: "e", depends: ["c"], ...undo("e") }),
    ]);
    // a 100 … e 104; compensations a 105, c 106, d 107, e 108.
    expect(state.jobs.get(105)?.depends).toEqual([106, 107]);
    expect(state.jobs.get(106)?.depends).toEqual([108]);
    expect(state.jobs.get(107)?.depends).toEqual([]);
  });

  it("wait for an attempt in flight when the flow failed, and undo it if it finishes", () => {
    const d = started([
      jobIn({ name: "a", ...undo("a") }),
      jobIn({ name: "slow", depends: ["a"], ...undo("slow") }),
      jobIn({ name: "bad", depends: ["a"] }),
    ]);
    d.run(100);
    const slow = { job: 101, attempt: 1, runner: 2 };
    d.send({ type: "assigned", ...slow, at: T + 1 });
    d.send({ type: "started", ...slow, at: T + 2 });
    d.run(102, { error: "boom" });
    expect(d.state.status).toBe("compensating");
    // a's compensation waits for slow's, which waits for slow itself.
    expect(d.statusOf([103, 104])).toEqual(["waiting_for_prerequisites", "waiting_for_prerequisites"]);
    expect(d.send({ type: "finished", ...slow, result: {}, at: T + 3 }).effects).toEqual([
      { type: "jobEnded", job: 101 },
      { type: "dispatch", job: 104, attempt: 1 },
    ]);
    d.run(104);
    d.run(103);
    expect(d.state.status).toBe("compensated");
  });

  it("skip the compensation of an attempt in flight that fails after all", () => {
    const d = started([jobIn({ name: "a", ...undo("a") }), jobIn({ name: "b", ...undo("b") }), jobIn({ name: "c" })]);
    d.run(100);
    const b = { job: 101, attempt: 1, runner: 2 };
    d.send({ type: "assigned", ...b, at: T + 1 });
    d.run(102, { error: "boom" });
    // a's compensation runs at once (it waits for nothing); b's waits for b.
    expect(d.job(103).status).toBe("dispatched");
    expect(d.job(104).status).toBe("waiting_for_prerequisites");
    d.send({ type: "failed", ...b, error: "late", at: T + 2 });
    expect(d.job(104)).toMatchObject({ status: "skipped", skipReason: expect.stringContaining("b did not finish") });
    d.run(103);
    expect(d.state.status).toBe("compensated");
  });
});

describe("a compensation that fails", () => {
  it("is retried, then dead-lettered; what waits for it is not run, and the flow ends compensation_failed", () => {
    const d = failedAtShip();
    d.run(SHIP, { error: "out of stock" });
    expect(d.run(REFUND, { error: "gateway down" }).effects).toEqual([
      { type: "attemptFailed", job: REFUND, attempt: 1 },
    ]);
    const retry = d.job(REFUND).deadline;
    expect(retry?.kind).toBe("retry");
    expect(d.send({ type: "deadline", job: REFUND, attempt: 1, kind: "retry", at: retry?.at ?? 0 }).outcome).toBe(
      "applied",
    );
    const end = d.run(REFUND, { error: "gateway still down" });
    expect(end.effects).toEqual([
      { type: "jobEnded", job: REFUND },
      { type: "deadLetter", job: REFUND, kind: "job", reason: "gateway still down" },
      { type: "jobEnded", job: UNBOOK },
      { type: "flowEnded" },
    ]);
    expect(d.job(UNBOOK).skipReason).toBe("not run: compensation charge.compensate failed");
    expect(d.state).toMatchObject({
      status: "compensation_failed",
      error: { job: SHIP, reason: "out of stock", failed_compensations: ["charge.compensate"] },
    });
    expect(d.dispatches.get(REFUND)).toBe(2);
  });

  it("runs again with a re-run, and the unwinding carries on", () => {
    const d = failedAtShip();
    d.run(SHIP, { error: "out of stock" });
    d.run(REFUND, { error: "down" });
    d.send({ type: "deadline", job: REFUND, attempt: 1, kind: "retry", at: d.job(REFUND).deadline?.at ?? 0 });
    d.run(REFUND, { error: "down" });
    expect(rerunJobs(d.state)).toEqual([UNBOOK, REFUND]);
    const t = d.send({ type: "rerun", bases: rerunBases(d.state, 2000), at: T + 50 });
    expect(t.effects).toEqual([
      { type: "flowRerun", jobs: [UNBOOK, REFUND], was: "compensation_failed" },
      { type: "dispatch", job: REFUND, attempt: 3 },
    ]);
    expect(d.state.status).toBe("compensating");
    expect(d.state.error).toEqual({ job: SHIP, name: "ship", reason: "out of stock" });
    // Ship's failed job is not run again: the flow is being undone, not redone.
    expect(d.job(SHIP).status).toBe("error");
    d.run(REFUND);
    d.run(UNBOOK);
    expect(d.state.status).toBe("compensated");
    expect(d.state.endedAt).toBeDefined();
  });
});
