import { describe, expect, it } from "vitest";
import {
  FLOW_LIMITS,
  FlowJobInput,
  journalOf,
  nearestDeadline,
  rebuildState,
  rerunBases,
  rerunJobs,
} from "../../shared/flow/index.js";
import { instantiate, TemplateFile } from "../../shared/flow/template-file.js";
import type { Message, RunnerJob } from "../../shared/model/index.js";
import { dispatchMessage, flowRecord, jobRecord } from "../../shared/store/flow-records.js";
import { Driver, flowOf, jobIn, resolveInputs, started, T, TIMEOUTS, type JobIn } from "./flow-sim.js";
import { BOOK, CHARGE, failedAtShip, REFUND, SAGA, SHIP, UNBOOK, undo, UNSHIP } from "./saga-sim.js";

// Compensation (sagas), continued from flow-machine-compensation.test.ts: cancels with and
// without compensate, the flow's deadline, replayed reports, a rebuild of an unwinding flow, and
// what a submission (or a template) may say of a compensation.

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
    const half = FLOW_LIMITS.jobsPerFlow / 2 + 1;
    const many = Array.from({ length: half }, () => jobIn(undo("x")));
    expect(issues(many)).toEqual([
      {
        field: "jobs",
        message: `a flow has at most ${FLOW_LIMITS.jobsPerFlow} jobs, compensations counted: this one has ${half} and ${half} compensations`,
      },
    ]);
    expect(issues(many.slice(1))).toEqual([]);
  });

  it("names an unnamed job's compensation by its id", () => {
    const out = resolveInputs([jobIn({ id: 7, ...undo("x") })]);
    expect("jobs" in out && out.jobs[1]).toMatchObject({ id: 100, name: "7.compensate", compensates: 7 });
  });
});

describe("a template's compensation", () => {
  it("gets the template's inputs in its env_vars as its job does, and names no input the template lacks", () => {
    const file = TemplateFile.parse({
      inputs: { order: { type: "string" } },
      jobs: [
        {
          name: "charge",
          script_type: "sh",
          script: "true",
          env_vars: { ORDER: "${inputs.order}" },
          compensate: { script_type: "sh", script: "refund", env_vars: { REFUND_FOR: "order ${inputs.order}" } },
        },
      ],
    });
    const made = instantiate(file, { order: "42" });
    if (!("flow" in made)) throw new Error(JSON.stringify(made.issues));
    expect(made.flow.jobs[0]?.compensate?.env_vars).toEqual({ REFUND_FOR: "order 42" });
    const undeclared = TemplateFile.safeParse({
      jobs: [
        { ...jobIn({ name: "a" }), compensate: { script: "x", script_type: "sh", env_vars: { X: "${inputs.nope}" } } },
      ],
    });
    expect(undeclared.error?.issues.map((i) => i.path.join("."))).toEqual(["jobs.0.compensate.env_vars.X"]);
  });
});

describe("a re-run from a job", () => {
  it("of a saga that finished arms its compensations again: a failure of the new run unwinds it", () => {
    const d = started(SAGA);
    for (const id of [BOOK, CHARGE, SHIP]) d.run(id);
    expect(d.state.status).toBe("finished");
    expect(rerunJobs(d.state, CHARGE)).toEqual([CHARGE, SHIP, UNBOOK, REFUND, UNSHIP]);
    const t = d.send({ type: "rerun", from: CHARGE, run: 1, bases: rerunBases(d.state, 3000, CHARGE), at: T + 5 });
    expect(t.outcome).toBe("applied");
    expect(d.statusOf([UNBOOK, REFUND, UNSHIP])).toEqual(Array(3).fill("waiting_for_prerequisites"));
    d.run(CHARGE);
    d.run(SHIP, { error: "no" });
    expect(d.state.status).toBe("compensating");
    d.run(REFUND);
    d.run(UNBOOK);
    expect(d.state).toMatchObject({ status: "compensated", run: 2 });
  });

  it("of a flow that unwound is refused, and so is one from a compensation", () => {
    const d = failedAtShip();
    d.run(SHIP, { error: "no" });
    d.run(REFUND);
    d.run(UNBOOK);
    const refused = d.send({ type: "rerun", from: BOOK, run: 1, bases: {}, at: T + 9 });
    expect(refused).toMatchObject({ outcome: "not-applicable", reason: expect.stringContaining("unwound") });
    const ok = started(SAGA);
    for (const id of [BOOK, CHARGE, SHIP]) ok.run(id);
    const fromUndo = ok.send({ type: "rerun", from: UNBOOK, run: 1, bases: {}, at: T + 9 });
    expect(fromUndo).toMatchObject({ outcome: "not-applicable", reason: expect.stringContaining("compensation") });
  });
});
