import { describe, expect, it } from "vitest";
import { journalOf, rebuildState, type FlowEvent, type FlowState } from "../../shared/flow/index.js";
import { childResult } from "../../shared/flow/children.js";
import { flowRecord, jobRecord } from "../../shared/store/flow-records.js";
import { MAX_CHILD_DEPTH } from "../../shared/model/index.js";
import { Driver, flowOf, jobIn, started, T, type JobIn } from "./flow-sim.js";

// Child-flow jobs in the pure machine: a job that starts a flow from a template and ends with it,
// exactly once, whatever repeats, comes late or comes out of order.

const child = (template = "report", more: Partial<JobIn> = {}): Partial<JobIn> => ({
  script: undefined,
  script_type: undefined,
  flow: { template, inputs: { region: "us" } },
  ...more,
});

const ended = (job: number, attempt: number, childId: number, more: Partial<FlowEvent> = {}): FlowEvent =>
  ({
    type: "childEnded",
    job,
    attempt,
    child: childId,
    status: "finished",
    result: { fetch: { rows: "30" } },
    at: T + 500,
    ...more,
  }) as FlowEvent;

describe("a child-flow job", () => {
  it("starts without a runner, asks for its child, records it once, and finishes with the child's result", () => {
    const d = started([jobIn({ name: "sub", ...child() }), jobIn({ name: "after", depends: ["sub"] })]);
    expect(d.job(100)).toMatchObject({ status: "started", attempt: 1, deadline: { kind: "child", attempt: 1 } });
    expect(d.effects).toContainEqual({ type: "superviseChild", job: 100, attempt: 1 });
    expect(d.dispatches.size).toBe(0);

    expect(d.send({ type: "childStarted", job: 100, attempt: 1, child: 12, at: T + 1 }).outcome).toBe("applied");
    expect(d.job(100).child).toBe(12);
    // The same child again is a duplicate; another child (a second start) is stale; so is another attempt.
    expect(d.send({ type: "childStarted", job: 100, attempt: 1, child: 12, at: T + 2 }).outcome).toBe("duplicate");
    expect(d.send({ type: "childStarted", job: 100, attempt: 1, child: 13, at: T + 2 }).outcome).toBe("stale");
    expect(d.send({ type: "childStarted", job: 100, attempt: 2, child: 12, at: T + 2 }).outcome).toBe("stale");
    // An end of another child, or of another attempt, changes nothing.
    expect(d.send(ended(100, 1, 13)).outcome).toBe("stale");
    expect(d.send(ended(100, 2, 12)).outcome).toBe("stale");

    expect(d.send(ended(100, 1, 12)).outcome).toBe("applied");
    expect(d.job(100)).toMatchObject({
      status: "finished",
      child: 12,
      result: { child_flow_id: "12", "fetch.rows": "30" },
    });
    expect(d.effects).toContainEqual({ type: "dispatch", job: 101, attempt: 1 });
    // Told again (the child's own telling and the parent's look both found it): a duplicate.
    expect(d.send(ended(100, 1, 12)).outcome).toBe("duplicate");
    expect(d.send({ type: "deadline", job: 100, attempt: 1, kind: "child", at: T + 120_000 }).outcome).toBe("stale");
  });

  it("takes an end that comes before its start was recorded (the child ran fast), and then refuses the start", () => {
    const d = started([jobIn({ name: "sub", ...child() })]);
    expect(d.send(ended(100, 1, 12)).outcome).toBe("applied");
    expect(d.job(100)).toMatchObject({ status: "finished", child: 12 });
    expect(d.state.status).toBe("finished");
    expect(d.send({ type: "childStarted", job: 100, attempt: 1, child: 12, at: T + 600 }).outcome).toBe("duplicate");
  });

  it("fails with the child's error, failing its flow", () => {
    const d = started([jobIn({ name: "sub", ...child() })]);
    d.send({ type: "childStarted", job: 100, attempt: 1, child: 12, at: T + 1 });
    const t = d.send(ended(100, 1, 12, { status: "error", error: "job fetch failed: exit 1" }));
    expect(t.outcome).toBe("applied");
    expect(d.job(100)).toMatchObject({ status: "error", error: "child flow 12 failed: job fetch failed: exit 1" });
    expect(d.state.status).toBe("error");
    expect(t.effects).toContainEqual({ type: "deadLetter", job: 100, kind: "job", reason: d.job(100).error });
  });

  it("fails when its child cannot be started for good, unless the child was recorded", () => {
    const d = started([jobIn({ name: "sub", ...child() }), jobIn({ name: "two", ...child("other") })]);
    const refused = { type: "childRefused", attempt: 1, error: "Not Found: template gone", at: T + 1 } as const;
    expect(d.send({ ...refused, job: 100 }).outcome).toBe("applied");
    expect(d.job(100)).toMatchObject({
      status: "error",
      error: "its child flow could not be started: Not Found: template gone",
    });
    expect(d.send({ ...refused, job: 100 }).outcome).toBe("duplicate");
  });

  it("looks at its child again at each deadline, a minute apart, naming the child once known", () => {
    const d = started([jobIn({ name: "sub", ...child() })]);
    const first = d.job(100).deadline?.at as number;
    expect(d.send({ type: "deadline", job: 100, attempt: 1, kind: "child", at: first - 1 }).outcome).toBe(
      "not-applicable",
    );
    const t = d.send({ type: "deadline", job: 100, attempt: 1, kind: "child", at: first });
    expect(t.effects).toEqual([{ type: "superviseChild", job: 100, attempt: 1 }]);
    expect(d.job(100).deadline).toEqual({ kind: "child", attempt: 1, at: first + 60_000 });
    d.send({ type: "childStarted", job: 100, attempt: 1, child: 12, at: first + 1 });
    const again = d.send({ type: "deadline", job: 100, attempt: 1, kind: "child", at: first + 60_000 });
    expect(again.effects).toEqual([{ type: "superviseChild", job: 100, attempt: 1, child: 12 }]);
    expect(d.job(100).status).toBe("started");
  });

  it("fails at its flow.timeout, cancelling its child, and a late end of that child changes nothing", () => {
    const d = started([
      jobIn({ name: "sub", ...child("report", { flow: { template: "report", inputs: {}, timeout: 90 } }) }),
    ]);
    const start = d.job(100).startedAt as number;
    expect(d.job(100).deadline?.at).toBe(start + 60_000);
    d.send({ type: "childStarted", job: 100, attempt: 1, child: 12, at: start + 1 });
    d.send({ type: "deadline", job: 100, attempt: 1, kind: "child", at: start + 60_000 });
    // The next look is the timeout's end, not a minute later.
    expect(d.job(100).deadline?.at).toBe(start + 90_000);
    const t = d.send({ type: "deadline", job: 100, attempt: 1, kind: "child", at: start + 90_000 });
    const why = "its child flow 12 did not end within 90 s (flow.timeout)";
    expect(t.effects).toContainEqual({ type: "cancelChild", job: 100, attempt: 1, child: 12, reason: why });
    expect(d.job(100)).toMatchObject({ status: "error", error: why });
    expect(d.state.status).toBe("error");
    expect(d.send(ended(100, 1, 12, { at: start + 91_000 })).outcome).toBe("duplicate");
  });

  it("is cancelled with its flow, and its child with it (known or still being started)", () => {
    const d = started([jobIn({ name: "a", ...child() }), jobIn({ name: "b", ...child("other") })]);
    d.send({ type: "childStarted", job: 100, attempt: 1, child: 12, at: T + 1 });
    const t = d.send({ type: "cancel", reason: "stop", at: T + 2 });
    expect(t.effects).toContainEqual({
      type: "cancelChild",
      job: 100,
      attempt: 1,
      child: 12,
      reason: "cancelled: stop",
    });
    expect(t.effects).toContainEqual({ type: "cancelChild", job: 101, attempt: 1, reason: "cancelled: stop" });
    expect(d.statusOf([100, 101])).toEqual(["error", "error"]);
    // The child's end, told after, changes nothing; neither does a start recorded late.
    expect(d.send(ended(100, 1, 12, { status: "error", error: "cancelled" })).outcome).toBe("duplicate");
    expect(d.send({ type: "childStarted", job: 101, attempt: 1, child: 13, at: T + 3 }).outcome).toBe("stale");
  });

  it("has its child cancelled when another job fails its flow (its result can no longer matter)", () => {
    const d = started([jobIn({ name: "a", ...child() }), jobIn({ name: "s" })]);
    d.send({ type: "childStarted", job: 100, attempt: 1, child: 12, at: T + 1 });
    const t = d.run(101, { error: "exit 1" });
    expect(t.effects).toContainEqual({
      type: "cancelChild",
      job: 100,
      attempt: 1,
      child: 12,
      reason: "stopped: the flow failed (job s)",
    });
    expect(d.job(100).status).toBe("error");
    expect(d.state.status).toBe("error");
  });

  it("fails at once, starting nothing, in a flow nested as deep as flows may be", () => {
    const state: FlowState = {
      ...flowOf([jobIn({ name: "sub", ...child() })]),
      parent: { flow_id: 3, job_id: 9, attempt: 1, depth: MAX_CHILD_DEPTH },
    };
    const d = new Driver(state);
    const t = d.send({ type: "start", at: T });
    expect(t.effects.some((e) => e.type === "superviseChild")).toBe(false);
    expect(d.job(100)).toMatchObject({
      status: "error",
      error: `a child flow would be ${MAX_CHILD_DEPTH + 1} deep, past the limit of ${MAX_CHILD_DEPTH} flows nested (docs/limits.md)`,
    });
  });

  it("is rebuilt with its child from the journal, or started again (the same child, by its attempt) without it", () => {
    const d = started([jobIn({ name: "sub", ...child() })]);
    d.send({ type: "childStarted", job: 100, attempt: 1, child: 12, at: T + 1 });
    const job = d.job(100);
    // Redis as the commits left it: the job's record as created (its attempt is written when it ends).
    const { attempt: _attempt, ...record } = jobRecord(d.state, job, T);
    const stored = {
      flow: { ...flowRecord(d.state, T), started_at: T / 1000 },
      contextId: 3,
      callerId: 5,
      jobs: [record],
      messages: new Map(),
    };
    const rebuilt = rebuildState({ ...stored, journal: journalOf(d.state) });
    expect(rebuilt.jobs.get(100)).toMatchObject({ status: "started", attempt: 1, child: 12, deadline: job.deadline });
    expect(rebuilt.jobs.get(100)?.spec.flow).toEqual({ template: "report", inputs: { region: "us" } });

    // The journal lost: started again at the flow's start, attempt 1 again (so the same key, the same child).
    const lost = rebuildState(stored);
    expect(lost.jobs.get(100)).toMatchObject({
      status: "started",
      attempt: 1,
      deadline: { kind: "child", attempt: 1 },
    });
    expect(lost.jobs.get(100)?.child).toBeUndefined();
    const again = new Driver(lost);
    const t = again.send({ type: "deadline", job: 100, attempt: 1, kind: "child", at: T + 60_000 });
    expect(t.effects).toEqual([{ type: "superviseChild", job: 100, attempt: 1 }]);
  });

  it("keeps its child once ended, in its record, and a child flow keeps its parent", () => {
    const d = started([jobIn({ name: "sub", ...child() })]);
    d.send(ended(100, 1, 12));
    const record = jobRecord(d.state, d.job(100), T);
    expect(record.flow).toEqual({ template: "report", inputs: { region: "us" } });
    const parent = { flow_id: 3, job_id: 9, attempt: 1, depth: 1 };
    const flow = flowRecord({ ...d.state, parent }, T);
    expect(flow.parent).toEqual(parent);
    const rebuilt = rebuildState({
      flow,
      contextId: 3,
      callerId: 5,
      jobs: [{ ...record, status: "finished", child_flow_id: 12, result: d.job(100).result ?? {} }],
      messages: new Map(),
    });
    expect(rebuilt.parent).toEqual(parent);
    expect(rebuilt.jobs.get(100)).toMatchObject({ status: "finished", child: 12 });
  });
});

describe("a child's result", () => {
  it("is its jobs' results flattened as <job>.<key>, with the child's id", () => {
    expect(childResult(12, { fetch: { rows: "30" }, publish: { url: "u" } })).toEqual({
      child_flow_id: "12",
      "fetch.rows": "30",
      "publish.url": "u",
    });
  });
});
