import { describe, expect, it } from "vitest";
import {
  rerunJobs,
  flowResult,
  messageId,
  messagesNeeded,
  nearestDeadline,
  rerunBases,
  resultMessageId,
} from "../../shared/flow/index.js";
import { Driver, flowOf, jobIn, started, T } from "./flow-sim.js";

// The flow state machine ended from outside, or started again: cancel, and the re-run of a failed
// flow's failed jobs with their fresh message ids.

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
    // A second cancel (a client's retry) finds nothing left to stop: refused, naming the status.
    const again = d.send({ type: "cancel", reason: "again", at: T + 51 });
    expect([again.outcome, again.reason]).toEqual(["not-applicable", "the flow already ended: it is error"]);
    expect(d.send({ type: "assigned", job: 101, attempt: 1, runner: 1, at: T + 52 }).outcome).toBe("stale");
  });

  it("refuses to cancel a finished flow, and changes nothing", () => {
    const d = started([jobIn({ name: "a" })]);
    d.run(100, { result: { v: "1" } });
    const before = d.state;
    const t = d.send({ type: "cancel", reason: "late", at: T + 10 });
    expect([t.outcome, t.reason]).toEqual(["not-applicable", "the flow already ended: it is finished"]);
    expect(t.state).toBe(before);
    expect(t.effects).toEqual([]);
  });

  it("still stops the attempts a failed flow has in flight, then refuses", () => {
    const d = started([jobIn({ name: "bad" }), jobIn({ name: "slow" })]);
    const slow = { job: 101, attempt: 1, runner: 2 };
    d.send({ type: "assigned", ...slow, at: T + 1 });
    d.send({ type: "delivered", ...slow, acknowledged: true, at: T + 2 });
    d.run(100, { error: "boom" });
    expect([d.state.status, d.job(101).status]).toEqual(["error", "dispatched"]);
    const t = d.send({ type: "cancel", reason: "stop it", at: T + 20 });
    expect(t.outcome).toBe("applied");
    expect(t.effects).toEqual([
      { type: "cancelJob", job: 101, attempt: 1, runner: 2, reason: "stop it" },
      { type: "jobEnded", job: 101 },
    ]);
    // The flow keeps the error it ended with; a cancel now has nothing left to stop.
    expect(d.state.error).toMatchObject({ job: 100, reason: "boom" });
    expect(d.send({ type: "cancel", reason: "again", at: T + 21 }).outcome).toBe("not-applicable");
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
    const failed = rerunJobs(d.state);
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
      { type: "flowRerun", jobs: [101, 102], was: "error" },
      { type: "dispatch", job: 101, attempt: 3 },
    ]);
    expect(d.statusOf([100, 101, 102])).toEqual(["finished", "dispatched", "waiting_for_prerequisites"]);
    expect(flowResult(d.state)).toEqual({ ok: { v: "1" } });
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
