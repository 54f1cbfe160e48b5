import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { flowResult, jobKey, type FlowState } from "../../shared/flow/index.js";
import { flowOf, shapeJobs, simulate, type DagShape, type JobIn, type SimReport } from "./flow-sim.js";

/** Random DAG shapes of n jobs, n in [min, max]. */
function shapes(min: number, max: number): fc.Arbitrary<DagShape> {
  return fc.integer({ min, max }).chain((n) =>
    fc.record({
      n: fc.constant(n),
      picks: fc.array(fc.array(fc.nat({ max: 4000 }), { maxLength: 4 }), { minLength: n, maxLength: n }),
      seed: fc.noBias(fc.integer()),
    }),
  );
}

/** Jobs that (transitively) depend on any of `roots`, roots excluded. */
function downstream(state: FlowState, roots: number[]): Set<number> {
  const out = new Set<number>();
  const pending = roots.flatMap((id) => state.jobs.get(id)?.dependents ?? []);
  while (pending.length > 0) {
    const id = pending.pop() as number;
    if (out.has(id)) continue;
    out.add(id);
    pending.push(...(state.jobs.get(id)?.dependents ?? []));
  }
  return out;
}

function build(shape: DagShape, fields?: (i: number) => Partial<JobIn>): FlowState {
  return flowOf(shapeJobs(shape, fields), { firstId: 100 });
}

/** What holds for every run, whatever failed (checked in one pass: a 1,000-job run has many). */
function checkCommon(start: FlowState, report: SimReport): void {
  const { driver: d } = report;
  expect(report.wronglyApplied).toEqual([]);
  expect(d.effects.filter((e) => e.type === "flowStarted")).toHaveLength(1);
  expect(d.effects.filter((e) => e.type === "flowEnded")).toHaveLength(1);
  const ended = new Map<number, number>();
  for (const e of d.effects) if (e.type === "jobEnded") ended.set(e.job, (ended.get(e.job) ?? 0) + 1);
  const wrong: string[] = [];
  let finished = 0;
  for (const id of start.order) {
    const job = d.job(id);
    if (job.status !== "finished" && job.status !== "error") wrong.push(`job ${id} ends ${job.status}`);
    if (ended.get(id) !== 1) wrong.push(`job ${id} ended ${ended.get(id) ?? 0} times`);
    if (job.status === "finished" && (finished++, flowResult(d.state)[jobKey(job)] !== job.result))
      wrong.push(`no result of job ${id}`);
  }
  expect(wrong).toEqual([]);
  expect(Object.keys(flowResult(d.state))).toHaveLength(finished);
}

function runsOk(shape: DagShape): void {
  const start = build(shape);
  const report = simulate(start, shape.seed);
  checkCommon(start, report);
  const { driver: d } = report;
  expect(d.state.status).toBe("finished");
  expect(d.state.error).toBeUndefined();
  expect(d.dispatches.size).toBe(shape.n);
  expect([...d.dispatches.values()].every((count) => count === 1)).toBe(true);
  const result = flowResult(d.state);
  expect(Object.keys(result)).toHaveLength(shape.n);
  const results = start.order.filter((id) => result[jobKey(d.job(id))]?.out !== `${id}.1`);
  expect(results).toEqual([]);
}

function runsWithFailures(shape: DagShape, failing: number[]): void {
  const start = build(shape);
  const ids = new Set(failing.map((i) => start.order[i % shape.n] as number));
  const report = simulate(start, shape.seed, { fails: (job) => ids.has(job) });
  checkCommon(start, report);
  const { driver: d } = report;
  expect(d.state.status).toBe("error");
  expect(report.failed.length).toBeGreaterThan(0);
  expect(d.state.error?.job).toBe(report.failed[0]);
  expect([...d.dispatches.values()].every((count) => count === 1)).toBe(true);
  const doomed = [...downstream(start, report.failed)];
  expect(doomed.filter((id) => d.dispatches.has(id) || d.job(id).status !== "error")).toEqual([]);
  expect(report.failed.filter((id) => !ids.has(id))).toEqual([]);
}

const failures = fc.array(fc.nat(), { minLength: 1, maxLength: 5 });

// Large cases end on their first failure: shrinking a 1,000-job run would take minutes.
describe("random DAGs, runners reordering and replaying events", () => {
  it("small flows finish, every job dispatched once after its dependencies", () => {
    fc.assert(fc.property(shapes(1, 40), runsOk), { numRuns: 250 });
  });

  it("medium flows finish", () => {
    fc.assert(fc.property(shapes(40, 300), runsOk), { numRuns: 15, endOnFailure: true });
  });

  it("flows of close to 1,000 jobs finish", { timeout: 60_000 }, () => {
    fc.assert(fc.property(shapes(950, 999), runsOk), { numRuns: 1, endOnFailure: true });
  });

  it("a flow of exactly 1,000 jobs finishes", { timeout: 60_000 }, () => {
    fc.assert(fc.property(shapes(1000, 1000), runsOk), { numRuns: 1, endOnFailure: true });
  });
});

describe("random DAGs with failing jobs", () => {
  it("small flows end in error and run nothing downstream of a failure", () => {
    fc.assert(fc.property(shapes(1, 40), failures, runsWithFailures), { numRuns: 250 });
  });

  it("large flows end in error and run nothing downstream of a failure", { timeout: 60_000 }, () => {
    fc.assert(fc.property(shapes(900, 1000), failures, runsWithFailures), { numRuns: 2, endOnFailure: true });
  });
});

describe("random DAGs with retries", () => {
  it("a job runs at most 1 + retries times, and the flow finishes exactly when no job runs out", () => {
    const retries = fc.array(fc.integer({ min: 0, max: 2 }), { minLength: 1, maxLength: 60 });
    fc.assert(
      fc.property(shapes(1, 60), retries, fc.double({ min: 0, max: 0.5, noNaN: true }), (shape, tries, rate) => {
        const start = build(shape, (i) => ({ retries: tries[i % tries.length] as number }));
        const report = simulate(start, shape.seed, { fails: (_job, _attempt, rnd) => rnd() < rate });
        checkCommon(start, report);
        const { driver: d } = report;
        for (const [id, count] of d.dispatches) expect(count).toBeLessThanOrEqual(d.job(id).spec.retries + 1);
        const exhausted = report.failed;
        // The failure that ended the flow used every attempt; once the flow failed, nothing is retried.
        const first = exhausted[0];
        if (first !== undefined) expect(d.job(first).attempt).toBe(d.job(first).spec.retries + 1);
        expect(d.state.status).toBe(exhausted.length === 0 ? "finished" : "error");
        for (const id of downstream(start, exhausted)) expect(d.dispatches.has(id)).toBe(false);
      }),
      { numRuns: 150 },
    );
  });
});

const NEEDS = ["all_finished", "all_done", "any_finished", "none_failed"] as const;

/** Random rules per job: its needs, whether it may fail, and a `when` that is false for some. */
const rules = fc.array(
  fc.record({ needs: fc.constantFrom(...NEEDS), allowFailure: fc.boolean(), skip: fc.boolean() }),
  { minLength: 1, maxLength: 40 },
);

describe("random DAGs with rules (needs, allow_failure, when) and failing jobs", () => {
  it("every job ends once, runs only when its rules let it, and the flow fails only for a failure not allowed", () => {
    fc.assert(
      fc.property(shapes(1, 40), rules, failures, (shape, jobRules, failing) => {
        const rule = (i: number) => jobRules[i % jobRules.length] as (typeof jobRules)[number];
        const start = build(shape, (i) => ({
          needs: rule(i).needs,
          allow_failure: rule(i).allowFailure,
          env_vars: { RUN: rule(i).skip ? "no" : "yes" },
          when: 'env.RUN == "yes"',
        }));
        const ids = new Set(failing.map((i) => start.order[i % shape.n] as number));
        // The driver checks each dispatch against its job's rules (flow-sim.ts).
        const { driver: d, wronglyApplied } = simulate(start, shape.seed, { fails: (job) => ids.has(job) });
        expect(wronglyApplied).toEqual([]);
        expect(d.effects.filter((e) => e.type === "flowEnded")).toHaveLength(1);
        const ended = new Map<number, number>();
        for (const e of d.effects) if (e.type === "jobEnded") ended.set(e.job, (ended.get(e.job) ?? 0) + 1);
        const wrong: string[] = [];
        for (const id of start.order) {
          const job = d.job(id);
          if (!["finished", "error", "skipped"].includes(job.status)) wrong.push(`job ${id} ends ${job.status}`);
          if (ended.get(id) !== 1) wrong.push(`job ${id} ended ${ended.get(id) ?? 0} times`);
          if (job.status === "skipped" && !job.skipReason) wrong.push(`job ${id} was skipped without a reason`);
          if (d.dispatches.has(id) && job.spec.env_vars.RUN === "no")
            wrong.push(`job ${id} ran though its when was false`);
        }
        expect(wrong).toEqual([]);
        // The flow failed exactly when a job that may not fail failed by itself (not as collateral).
        const culprits = start.order.filter((id) => {
          const job = d.job(id);
          return job.status === "error" && !job.spec.allow_failure && d.dispatches.has(id);
        });
        if (d.state.status === "error") {
          expect(d.state.error?.job).toBeDefined();
          expect(d.job(d.state.error?.job as number).spec.allow_failure).not.toBe(true);
        } else expect(culprits).toEqual([]);
      }),
      { numRuns: 300 },
    );
  });
});
