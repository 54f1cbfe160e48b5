import { describe, expect, it } from "vitest";
import { journalOf, rebuildState } from "../../shared/flow/index.js";
import { dispatchMessage, flowRecord, jobRecord } from "../../shared/store/flow-records.js";
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
    const job = state.jobs[100];
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
    expect(rebuilt.jobs[100]).toMatchObject({
      status: "dispatched",
      attempt: 1,
      deadline: { kind: "retry", attempt: 1 },
    });
    // So the ended attempt is not failed again: a late report of it is stale.
    d.state = rebuilt;
    expect(d.send({ type: "failed", ...ev, error: "exit 1", at: T + 3 }).outcome).toBe("stale");
  });
});
