import { describe, expect, it } from "vitest";
import {
  flowResult,
  jobEnvironment,
  journalOf,
  nearestDeadline,
  rebuildState,
  rerunBases,
  rerunJobs,
} from "../../shared/flow/index.js";
import { changesOf } from "../../shared/flow/changes.js";
import { dispatchMessage, flowRecord, jobRecord } from "../../shared/store/flow-records.js";
import type { Message, RunnerJob } from "../../shared/model/index.js";
import { Driver, flowOf, jobIn, resolveInputs, started, T, TIMEOUTS, type JobIn } from "./flow-sim.js";
import { FLOW_LIMITS, FlowJobInput } from "../../shared/flow/index.js";

// Compensation (sagas): a job's `compensate` is a job of its own that runs only while the flow
// unwinds, in reverse dependency order, once the job it undoes finished.

const undo = (what: string, fields: Partial<NonNullable<JobIn["compensate"]>> = {}) => ({
  compensate: { script: `echo undo ${what}`, script_type: "sh" as const, ...fields },
});

/** book → charge → ship, each with a compensation: ids 100-102, their compensations 103-105. */
const SAGA: JobIn[] = [
  jobIn({ name: "book", ...undo("book") }),
  jobIn({ name: "charge", depends: ["book"], ...undo("charge", { retries: 1 }) }),
  jobIn({ name: "ship", depends: ["charge"], ...undo("ship") }),
];
const [BOOK, CHARGE, SHIP, UNBOOK, REFUND, UNSHIP] = [100, 101, 102, 103, 104, 105];

/** The saga run to ship's failure: book and charge finished. */
function failedAtShip(): Driver {
  const d = started(SAGA);
  d.run(BOOK, { result: { booking: "B-7" } });
  d.run(CHARGE, { result: { payment: "P-9", amount: "12.50" } });
  return d;
}

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

describe("cancel with compensate", () => {
  it("stops what runs and unwinds what finished; repeated, it changes nothing", () => {
    const d = started(SAGA);
    d.run(BOOK);
    const charge = { job: CHARGE, attempt: 1, runner: 3 };
    d.send({ type: "assigned", ...charge, at: T + 1 });
    d.send({ type: "started", ...charge, at: T + 2 });
    const t = d.send({ type: "cancel", reason: "customer left", at: T + 3, compensate: true });
    expect(t.effects).toContainEqual({
      type: "cancelJob",
      job: CHARGE,
      attempt: 1,
      runner: 3,
      reason: "customer left",
    });
    expect(d.state).toMatchObject({ status: "compensating", error: { job: 0, reason: "cancelled: customer left" } });
    // charge was cancelled mid-run: it did not finish, so nothing of it is undone; book's runs.
    expect(d.job(REFUND).status).toBe("skipped");
    expect(d.job(UNBOOK).status).toBe("dispatched");
    const again = d.send({ type: "cancel", reason: "customer left", at: T + 4, compensate: true });
    expect(again.outcome).toBe("duplicate");
    d.run(UNBOOK);
    expect(d.state.status).toBe("compensated");
    expect(d.send({ type: "cancel", reason: "again", at: T + 9, compensate: true }).outcome).toBe("not-applicable");
  });

  it("without compensate, skips the compensations and ends in error; a re-run arms them again", () => {
    const d = started(SAGA);
    d.run(BOOK);
    d.send({ type: "cancel", reason: "stop", at: T + 1 });
    expect(d.state.status).toBe("error");
    expect(d.statusOf([UNBOOK, REFUND, UNSHIP])).toEqual(["skipped", "skipped", "skipped"]);
    expect(rerunJobs(d.state)).toEqual([CHARGE, SHIP, UNBOOK, REFUND, UNSHIP]);
    d.send({ type: "rerun", bases: rerunBases(d.state, 3000), at: T + 2 });
    expect(d.statusOf([CHARGE, UNBOOK, REFUND, UNSHIP])).toEqual([
      "dispatched",
      "waiting_for_prerequisites",
      "waiting_for_prerequisites",
      "waiting_for_prerequisites",
    ]);
    d.run(CHARGE);
    d.run(SHIP, { error: "no" });
    expect(d.state.status).toBe("compensating");
    d.run(REFUND);
    d.run(UNBOOK);
    expect(d.state.status).toBe("compensated");
  });

  it("stops an unwinding when cancelled without compensate: compensation_failed, re-runnable", () => {
    const d = failedAtShip();
    d.run(SHIP, { error: "no" });
    const refund = { job: REFUND, attempt: 1, runner: 4 };
    d.send({ type: "assigned", ...refund, at: T + 1 });
    const t = d.send({ type: "cancel", reason: "enough", at: T + 2 });
    expect(t.effects).toContainEqual({ type: "cancelJob", job: REFUND, attempt: 1, runner: 4, reason: "enough" });
    expect(d.state).toMatchObject({
      status: "compensation_failed",
      error: { job: SHIP, failed_compensations: ["book.compensate", "charge.compensate"] },
    });
    expect(rerunJobs(d.state)).toEqual([UNBOOK, REFUND]);
  });

  it("of a flow that never started unwinds nothing: every compensation is skipped", () => {
    const d = new Driver(flowOf(SAGA));
    d.send({ type: "cancel", reason: "no", at: T, compensate: true });
    expect(d.state.status).toBe("compensated");
    expect(d.statusOf([UNBOOK, REFUND, UNSHIP])).toEqual(["skipped", "skipped", "skipped"]);
    expect(d.dispatches.size).toBe(0);
  });

  it("of a flow without compensations is a cancel", () => {
    const d = started([jobIn()]);
    d.send({ type: "cancel", reason: "no", at: T, compensate: true });
    expect(d.state.status).toBe("error");
  });
});

describe("the flow's deadline", () => {
  it("unwinds a flow with compensations, and no longer holds once it unwinds", () => {
    const d = started(SAGA, { timeouts: { ...TIMEOUTS, flow: 60 } });
    d.run(BOOK, { at: T + 10 });
    const due = T + 60_000;
    expect(nearestDeadline(d.state)).toMatchObject({ kind: "flow" });
    d.send({ type: "deadline", job: 0, attempt: 0, kind: "flow", at: due });
    expect(d.state.status).toBe("compensating");
    expect(d.job(UNBOOK).status).toBe("dispatched");
    expect(nearestDeadline(d.state)?.kind).toBe("delivery");
    expect(d.send({ type: "deadline", job: 0, attempt: 0, kind: "flow", at: due + 1 }).outcome).toBe("stale");
  });
});

describe("replayed and reordered reports of compensations", () => {
  it("change nothing once applied, and a report of an ended one is stale", () => {
    const d = failedAtShip();
    d.run(SHIP, { error: "no" });
    const ev = { job: REFUND, attempt: 1, runner: 1 };
    d.send({ type: "assigned", ...ev, at: T + 1 });
    const finished = { type: "finished" as const, ...ev, result: {}, at: T + 3 };
    d.send({ type: "delivered", ...ev, acknowledged: true, at: T + 2 });
    expect(d.send(finished).outcome).toBe("applied");
    expect(d.send(finished).outcome).toBe("duplicate");
    expect(d.send({ type: "started", ...ev, at: T + 4 }).outcome).toBe("stale");
    expect(d.send({ type: "failed", ...ev, error: "late", at: T + 5 }).outcome).toBe("stale");
    expect(d.job(UNBOOK).attempt).toBe(1);
    expect(d.dispatches.get(UNBOOK)).toBe(1);
    // A retry deadline of a compensation that is not backing off is stale.
    expect(d.send({ type: "deadline", job: UNBOOK, attempt: 1, kind: "retry", at: T + 6 }).outcome).toBe("stale");
  });
});

describe("rebuilding an unwinding flow", () => {
  /** The records Redis holds of a state: the flow, each job (ended ones with their end), each attempt's message. */
  function records(d: Driver) {
    const state = d.state;
    const jobs: RunnerJob[] = state.order.map((id) => {
      const job = d.job(id);
      const record = jobRecord(state, job, T);
      const ended = ["finished", "error", "skipped"].includes(job.status);
      return ended
        ? { ...record, result: job.result ?? {}, ended_at: (T + 5_000) / 1000 }
        : { ...record, status: "dispatched" };
    });
    const messages = new Map<number, Message[]>();
    for (const id of state.order) {
      const job = d.job(id);
      const list = Array.from({ length: job.attempt }, (_, i) => dispatchMessage(state, job, i + 1, T));
      if (list.length > 0) messages.set(id, list);
    }
    const flow = {
      ...flowRecord(state, T),
      status: state.status,
      started_at: Math.floor((state.startedAt ?? T) / 1000),
      ...(state.compensatingAt !== undefined ? { compensating_at: Math.floor(state.compensatingAt / 1000) } : {}),
      ...(state.error ? { error: state.error } : {}),
    };
    return { flow, contextId: state.contextId, callerId: state.callerId, jobs, messages };
  }

  it("finds its status, which compensations run and which wait, and carries on", () => {
    const d = failedAtShip();
    d.run(SHIP, { error: "no" });
    const journal = journalOf(d.state);
    const rebuilt = rebuildState({ ...records(d), journal });
    expect(rebuilt.status).toBe("compensating");
    // Records keep whole seconds.
    expect(rebuilt.compensatingAt).toBe(Math.floor((d.state.compensatingAt ?? 0) / 1000) * 1000);
    expect(rebuilt.error).toEqual(d.state.error);
    for (const id of [UNBOOK, REFUND, UNSHIP])
      expect({ id, status: rebuilt.jobs.get(id)?.status }).toEqual({ id, status: d.job(id).status });
    expect(rebuilt.jobs.get(REFUND)?.deadline).toEqual(d.job(REFUND).deadline);
    expect(rebuilt.jobs.get(CHARGE)?.compensation).toBe(REFUND);

    // Without its journal the running compensation counts as dispatched, not delivered: the
    // flow goes on from there exactly as before.
    const bare = new Driver(rebuildState(records(d)));
    expect(bare.job(REFUND)).toMatchObject({ status: "dispatched", attempt: 1 });
    bare.run(REFUND);
    expect(bare.job(UNBOOK).status).toBe("dispatched");
    bare.run(UNBOOK);
    expect(bare.state.status).toBe("compensated");
    expect(bare.dispatches.get(REFUND)).toBeUndefined();
  });

  it("of a running flow keeps the compensations waiting for the flow to unwind", () => {
    const d = started(SAGA);
    d.run(BOOK);
    const rebuilt = new Driver(rebuildState({ ...records(d), journal: journalOf(d.state) }));
    expect(rebuilt.statusOf([UNBOOK, REFUND, UNSHIP])).toEqual(Array(3).fill("waiting_for_prerequisites"));
    rebuilt.run(CHARGE);
    rebuilt.run(SHIP);
    expect(rebuilt.state.status).toBe("finished");
  });
});

describe("a submission's compensate", () => {
  it("takes a job's script fields, with their limits, and nothing else", () => {
    const ok = FlowJobInput.parse(jobIn({ ...undo("x", { timeout: 30, retries: 3, env_vars: { A: "1" } }) }));
    expect(ok.compensate).toEqual({
      script: "echo undo x",
      script_type: "sh",
      timeout: 30,
      retries: 3,
      env_vars: { A: "1" },
    });
    const wrong = (compensate: unknown) =>
      FlowJobInput.safeParse({ ...jobIn(), compensate }).error?.issues.map((i) => i.path.join("."));
    expect(wrong({ script: "x" })).toEqual(["compensate.script_type"]);
    expect(wrong({ script: "x", script_type: "sh", retries: 256 })).toEqual(["compensate.retries"]);
    expect(wrong({ script: "x".repeat(FLOW_LIMITS.scriptBytes + 1), script_type: "sh" })).toEqual([
      "compensate.script",
    ]);
    expect(wrong({ script: "x", script_type: "sh", when: "true" })).toEqual(["compensate"]);
  });

  it("refuses a name its compensation would take, a name too long for one, and too many jobs", () => {
    const issues = (jobs: JobIn[]) => {
      const out = resolveInputs(jobs);
      return "issues" in out ? out.issues : [];
    };
    expect(issues([jobIn({ name: "a", ...undo("a") }), jobIn({ name: "a.compensate" })])).toEqual([
      { field: "jobs.1.name", message: "a.compensate is the name of job a's compensation" },
    ]);
    expect(issues([jobIn({ name: "n".repeat(54), ...undo("n") })])[0]?.field).toBe("jobs.0.name");
    expect(issues([jobIn({ name: "n".repeat(53), ...undo("n") })])).toEqual([]);
    const many = Array.from({ length: FLOW_LIMITS.jobsPerFlow / 2 + 1 }, () => jobIn(undo("x")));
    expect(issues(many)).toEqual([
      {
        field: "jobs",
        message: `a flow has at most ${FLOW_LIMITS.jobsPerFlow} jobs, compensations counted: this one has 1001 and 1001 compensations`,
      },
    ]);
    expect(issues(many.slice(1))).toEqual([]);
  });

  it("names an unnamed job's compensation by its id", () => {
    const out = resolveInputs([jobIn({ id: 7, ...undo("x") })]);
    expect("jobs" in out && out.jobs[1]).toMatchObject({ id: 100, name: "7.compensate", compensates: 7 });
  });
});
