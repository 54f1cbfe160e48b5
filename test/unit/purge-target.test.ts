import { describe, expect, it } from "vitest";
import { rerunBases, resultMessageId } from "../../shared/flow/index.js";
import { purgeTarget } from "../../functions/flow/purge-records.js";
import { jobIn, started, T } from "./flow-sim.js";

// What removing a flow removes: every message id its jobs ever used, re-runs included.

const scope = { prefix: "", contextId: 1, flowId: 7, origin: "https://c.example" };

describe("purgeTarget", () => {
  it("names this run's attempts, the runs before a re-run, and the result", () => {
    const d = started([
      jobIn({ name: "ok" }),
      jobIn({ name: "bad", retries: 1 }),
      jobIn({ name: "after", depends: ["bad"] }),
    ]);
    // Blocks from 1000: ok 1000, bad 1001-1002, after 1003, the result 1004.
    d.run(100);
    d.run(101, { error: "first" });
    d.send({ type: "deadline", job: 101, attempt: 1, kind: "retry", at: d.job(101).deadline?.at ?? 0 });
    d.run(101, { error: "second" });
    expect(d.state.status).toBe("error");
    d.send({ type: "rerun", bases: rerunBases(d.state, 1005), at: T + 100 });
    expect(d.job(101).pastMessages).toEqual([[1001, 1002]]);
    d.run(101);
    d.run(102);
    expect(d.state.status).toBe("finished");
    const target = purgeTarget(scope, d.state);
    expect(target.jobIds).toEqual([100, 101, 102]);
    expect(target.messageIds.sort((a, b) => a - b)).toEqual([1000, 1001, 1002, 1005, 1007]);
    expect(target.resultId).toBe(resultMessageId(d.state));
  });

  it("names only the owner and its index entries when the flow's state is gone", () => {
    expect(purgeTarget({ ...scope, flowId: 0, job: { callerId: 3, id: 9 } }, undefined)).toMatchObject({
      owner: { callerId: 3, jobId: 9 },
      callerId: 3,
      jobIds: [],
      messageIds: [],
    });
  });
});
