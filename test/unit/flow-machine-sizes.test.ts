import { describe, expect, it } from "vitest";
import { SIZE_LIMITS } from "../../shared/model/index.js";
import { dispatched, jobIn, started } from "./flow-sim.js";

// The machine's size rules (docs/limits.md): a result too big for a result, or for what is left
// of the flow's room, fails its attempt saying so; a job whose inputs are too big fails for good
// without an attempt. Deterministic: the same events give the same end, read back or not.

const blob = (n: number) => ({ blob: "x".repeat(n) });

describe("sizes in the flow machine", () => {
  it("fails an attempt whose result is over the limit, and retries it like any failed attempt", () => {
    const d = started([jobIn({ name: "big", retries: 1 }), jobIn({ name: "after", depends: ["big"] })]);
    const t = d.run(100, { result: blob(SIZE_LIMITS.result) });
    expect(t.effects).toContainEqual({ type: "attemptFailed", job: 100, attempt: 1 });
    expect(d.job(100).error).toMatch(/^its result is 64\.0 KiB, over the limit of 64 KiB for a result/);
    expect(d.job(100).result).toBeUndefined();
    expect(d.state.resultBytes ?? 0).toBe(0);
  });

  it("takes a result at the limit, and counts it in the flow's results", () => {
    const d = started([jobIn({ name: "fits" })]);
    const result = blob(SIZE_LIMITS.result - 20);
    d.run(100, { result });
    expect(d.state.status).toBe("finished");
    expect(d.state.resultBytes).toBe(JSON.stringify(result).length);
  });

  it("fails the results that would take the flow's past its limit, then the flow", () => {
    const n = Math.ceil(SIZE_LIMITS.flowResults / 60_000) + 1;
    const d = started(Array.from({ length: n }, (_, i) => jobIn({ name: `j${i}` })));
    for (let i = 0; i < n && d.state.status === "started"; i++) d.run(100 + i, { result: blob(60_000) });
    expect(d.state.status).toBe("error");
    expect(d.state.error?.reason).toMatch(/would take the flow's results to 2\.\d MiB, over the limit of 2 MiB/);
    expect(d.state.resultBytes).toBeLessThanOrEqual(SIZE_LIMITS.flowResults);
  });

  it("counts the results a state read back holds, as the one kept them", () => {
    const d = started([jobIn({ name: "a" }), jobIn({ name: "b" })]);
    d.run(100, { result: blob(1000) });
    const { resultBytes, ...readBack } = d.state;
    const again = started([jobIn({ name: "x" })]);
    again.state = readBack;
    again.run(101, { result: blob(1000) });
    expect(again.state.resultBytes).toBe((resultBytes ?? 0) + JSON.stringify(blob(1000)).length);
  });

  it("does not run a job whose inputs are over the limit: it fails for good, with no attempt", () => {
    const d = started([
      jobIn({ name: "a" }),
      jobIn({ name: "b" }),
      jobIn({ name: "c", retries: 3, depends: ["a", "b"] }),
      jobIn({ name: "d", depends: ["c"] }),
    ]);
    d.run(100, { result: blob(SIZE_LIMITS.inputs / 2) });
    const t = d.run(101, { result: blob(SIZE_LIMITS.inputs / 2) });
    expect(dispatched(d)).toEqual([100, 101]);
    expect(d.job(102)).toMatchObject({ status: "error", attempt: 0 });
    expect(d.job(102).error).toMatch(
      /^not run: its inputs \(its dependencies' results\) are 120\.\d KiB, over the limit of 120 KiB/,
    );
    expect(t.effects).toContainEqual(expect.objectContaining({ type: "deadLetter", job: 102 }));
    expect(d.job(103).error).toBe("not run: dependency c failed");
    expect(d.state.status).toBe("error");
  });
});
