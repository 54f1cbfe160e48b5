import { describe, expect, it } from "vitest";
import { journalOf, rebuildState } from "../../shared/flow/index.js";
import { dispatchMessage, flowRecord, jobRecord, messageEnd } from "../../shared/store/flow-records.js";
import { jobIn, started, T } from "./flow-sim.js";

// Rebuilding a flow from Redis and the object's journal after it lost its memory, when the two
// disagree: the journal is written after a commit comes back, so after a commit whose outcome
// was unknown (and which then turned out applied) it tells of the state before that commit.

describe("rebuild", () => {
  it("takes an attempt Redis says ended as waiting for its retry, whatever an older journal says", () => {
    const d = started([jobIn({ name: "flaky", retries: 2 })]);
    const ev = { job: 100, attempt: 1, runner: 1 };
    d.send({ type: "assigned", ...ev, at: T + 1 });
    // What the journal held when the commit of the failure went out (its outcome unknown).
    const journal = journalOf(d.state);
    expect(journal[100]?.deadline?.kind).not.toBe("retry");
    const failed = d.send({ type: "failed", ...ev, error: "exit 1", at: T + 2 });
    expect(failed.effects).toContainEqual({ type: "attemptFailed", job: 100, attempt: 1 });

    // Redis after the commit: the attempt's message ended with an error; the job record unchanged.
    const state = d.state;
    const job = state.jobs.get(100);
    if (!job) throw new Error("no job 100");
    const message = { ...dispatchMessage(state, job, 1, T), status: "error" as const, ended_at: (T + 2) / 1000 };
    const rebuilt = rebuildState({
      flow: flowRecord(state, T),
      contextId: state.contextId,
      callerId: state.callerId,
      jobs: [{ ...jobRecord(state, job, T), status: "dispatched" }],
      messages: new Map([[100, [message]]]),
      journal,
    });
    expect(rebuilt.jobs.get(100)).toMatchObject({
      status: "dispatched",
      attempt: 1,
      deadline: { kind: "retry", attempt: 1 },
    });
    // So the ended attempt is not failed again: a late report of it is stale.
    d.state = rebuilt;
    expect(d.send({ type: "failed", ...ev, error: "exit 1", at: T + 3 }).outcome).toBe("stale");
  });

  it("takes where an ended job ran from its record, its last message holding no end", () => {
    const d = started([jobIn({ name: "once" })]);
    d.run(100, { runner: 7 });
    const state = d.state;
    const job = state.jobs.get(100);
    if (!job) throw new Error("no job 100");
    // Redis after the job's end: the job record holds the end; its message is as dispatched.
    const record = { ...jobRecord(state, job, T), ended_at: (T + 4) / 1000, last_runner_id: 7 };
    const rebuilt = rebuildState({
      flow: flowRecord(state, T),
      contextId: state.contextId,
      callerId: state.callerId,
      jobs: [record],
      messages: new Map([[100, [dispatchMessage(state, job, 1, T)]]]),
    });
    expect(rebuilt.jobs.get(100)).toMatchObject({
      status: "finished",
      delivery: { runnerId: 7, state: "acknowledged", at: T + 4 },
    });
  });
});

describe("a job attempt's message after its job ended", () => {
  const d = started([jobIn({ name: "twice", retries: 1 })]);
  const state = d.state;
  const job = state.jobs.get(100);
  if (!job) throw new Error("no job 100");
  const ended = {
    ...jobRecord(state, job, T),
    status: "finished" as const,
    attempt: 2,
    ended_at: 1_800_000_000,
    last_runner_id: 3,
  };

  it("takes its final status, end and runner from the job when it is the last attempt", () => {
    expect(messageEnd(dispatchMessage(state, job, 2, T), ended)).toMatchObject({
      status: "processed",
      ended_at: 1_800_000_000,
      updated_at: 1_800_000_000,
      runner_id: 3,
    });
    expect(messageEnd(dispatchMessage(state, job, 2, T), { ...ended, status: "error" })?.status).toBe("error");
  });

  it("leaves an earlier attempt, a message with an end of its own and a job not ended as they are", () => {
    expect(messageEnd(dispatchMessage(state, job, 1, T), ended)).toBeNull();
    const own = { ...dispatchMessage(state, job, 2, T), status: "error" as const, ended_at: 1_700_000_000 };
    expect(messageEnd(own, ended)).toBeNull();
    const { ended_at: _, ...running } = ended;
    expect(messageEnd(dispatchMessage(state, job, 2, T), { ...running, status: "dispatched" })).toBeNull();
  });
});

describe("a flow started from a template", () => {
  it("keeps the template and version it came from through its record", () => {
    const d = started([jobIn({ name: "one" })]);
    d.state = { ...d.state, template: { name: "report", version: 3 } };
    const state = d.state;
    const job = state.jobs.get(100);
    if (!job) throw new Error("no job 100");
    const record = flowRecord(state, T);
    expect(record.template).toEqual({ name: "report", version: 3 });
    const rebuilt = rebuildState({
      flow: record,
      contextId: state.contextId,
      callerId: state.callerId,
      jobs: [jobRecord(state, job, T)],
      messages: new Map(),
      journal: {},
    });
    expect(rebuilt.template).toEqual({ name: "report", version: 3 });
    // A flow of its own has none.
    const { template: _template, ...own } = state;
    const plain = rebuildState({
      flow: flowRecord(own, T),
      contextId: state.contextId,
      callerId: state.callerId,
      jobs: [jobRecord(own, job, T)],
      messages: new Map(),
      journal: {},
    });
    expect(plain.template).toBeUndefined();
  });
});
