import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { rerunBases, rerunJobs, type FlowEvent, type FlowState } from "../../shared/flow/index.js";
import { flowOf, shapeJobs, simulate, type DagShape, type Driver, type JobIn } from "./flow-sim.js";

// Re-runs from a random job of random DAGs that ran to their end (simulated runners reordering
// and replaying events): what is not downstream of the job (nor a failure) is left exactly as it
// was, what is runs once more by its rules, and the same re-run sent again changes nothing.

/** Random DAG shapes of n jobs, n in [min, max] (as flow-property.test.ts). */
function shapes(min: number, max: number): fc.Arbitrary<DagShape> {
  return fc.integer({ min, max }).chain((n) =>
    fc.record({
      n: fc.constant(n),
      picks: fc.array(fc.array(fc.nat({ max: 4000 }), { maxLength: 4 }), { minLength: n, maxLength: n }),
      seed: fc.noBias(fc.integer()),
    }),
  );
}

/** `root` and every job that depends on it, at any depth, found here without the code under test. */
function downstream(state: FlowState, root: number): Set<number> {
  const out = new Set<number>();
  const pending = [root];
  while (pending.length > 0) {
    const id = pending.pop() as number;
    if (out.has(id)) continue;
    out.add(id);
    for (const other of state.order) if (state.jobs.get(other)?.depends.includes(id)) pending.push(other);
  }
  return out;
}

/** Runs every job waiting for a runner until none is, none failing. */
function runAll(d: Driver): void {
  for (let round = 0; round < 2000; round++) {
    const ready = d.state.order.filter((id) => d.job(id).status === "dispatched" && !d.job(id).delivery);
    if (ready.length === 0) return;
    for (const id of ready) d.run(id, { at: 5_000_000 + round });
  }
}

/** A flow run to its end, re-run from the job at `pick`, then run to its end again without failures. */
function rerunChecked(start: FlowState, seed: number, pick: number, fails: Set<number>): void {
  const { driver: d } = simulate(start, seed, { fails: (job) => fails.has(job) });
  const ended = d.state;
  expect(["finished", "error"]).toContain(ended.status);
  const from = ended.order[pick % ended.order.length] as number;
  const again = new Set(downstream(ended, from));
  if (ended.status === "error") for (const id of ended.order) if (d.job(id).status === "error") again.add(id);
  // (A failure's skipped dependents are in the set too: the machine's own rerunJobs adds those.)
  const asked = rerunJobs(ended, from);
  for (const id of again) expect(asked).toContain(id);
  const event: FlowEvent = { type: "rerun", bases: rerunBases(ended, 90_000, from), at: 9_000_000, from, run: 1 };
  const effectsBefore = d.effects.length;
  const t = d.send(event);
  expect(t.outcome).toBe("applied");
  expect(d.state.run).toBe(2);
  for (const id of ended.order) if (!asked.includes(id)) expect(d.job(id)).toBe(ended.jobs.get(id));
  // The same request again is refused, whatever state the flow is in.
  expect(d.send(event).outcome).toBe("not-applicable");
  runAll(d);
  expect(d.send(event).outcome).toBe("not-applicable");
  expect(d.state.status).toBe("finished");
  const after = d.effects.slice(effectsBefore);
  const endedAgain = after.filter((e) => e.type === "jobEnded").map((e) => (e as { job: number }).job);
  expect(endedAgain.sort((a, b) => a - b)).toEqual([...asked].sort((a, b) => a - b));
  for (const id of ended.order) if (!asked.includes(id)) expect(d.job(id)).toBe(ended.jobs.get(id));
  expect(after.filter((e) => e.type === "flowEnded")).toHaveLength(1);
}

const NEEDS = ["all_finished", "all_done", "any_finished", "none_failed"] as const;

describe("random DAGs re-run from a random job", () => {
  it("a finished flow: upstream untouched, downstream run once more, a repeat refused", { timeout: 30_000 }, () => {
    fc.assert(
      fc.property(shapes(1, 40), fc.nat(), (shape, pick) => {
        rerunChecked(flowOf(shapeJobs(shape), { firstId: 100 }), shape.seed, pick, new Set());
      }),
      { numRuns: 200 },
    );
  });

  it(
    "with rules and failures in the first run: the failures and what is downstream run again, by the rules",
    { timeout: 30_000 },
    () => {
      const rules = fc.array(
        fc.record({ needs: fc.constantFrom(...NEEDS), allowFailure: fc.boolean(), skip: fc.boolean() }),
        { minLength: 1, maxLength: 40 },
      );
      fc.assert(
        fc.property(
          shapes(1, 40),
          rules,
          fc.array(fc.nat(), { maxLength: 4 }),
          fc.nat(),
          (shape, jobRules, f, pick) => {
            const rule = (i: number) => jobRules[i % jobRules.length] as (typeof jobRules)[number];
            const fields = (i: number): Partial<JobIn> => ({
              needs: rule(i).needs,
              allow_failure: rule(i).allowFailure,
              env_vars: { RUN: rule(i).skip ? "no" : "yes" },
              when: 'env.RUN == "yes"',
            });
            const start = flowOf(shapeJobs(shape, fields), { firstId: 100 });
            const fails = new Set(f.map((i) => start.order[i % shape.n] as number));
            rerunChecked(start, shape.seed, pick, fails);
          },
        ),
        { numRuns: 200 },
      );
    },
  );
});
