import fc from "fast-check";
import { describe, expect, it } from "vitest";
import type { FlowState, JobState } from "../../shared/flow/index.js";
import { flowOf, shapeJobs, simulate, type DagShape } from "./flow-sim.js";

// Random sagas: DAGs where some jobs declare compensations, runners that reorder and replay
// their events, main jobs and compensations that fail (with retries). Whatever happens, the
// unwinding keeps its promises.

const shapes = fc.integer({ min: 1, max: 30 }).chain((n) =>
  fc.record({
    n: fc.constant(n),
    picks: fc.array(fc.array(fc.nat({ max: 4000 }), { maxLength: 3 }), { minLength: n, maxLength: n }),
    seed: fc.noBias(fc.integer()),
  }),
);

/**
 * Per job: whether it has a compensation, that compensation's retries, whether the job fails,
 * and whether it is a clean-up (`needs: all_done`, which still runs once the flow failed).
 */
const plans = fc.array(
  fc.record({
    undo: fc.boolean(),
    retries: fc.integer({ min: 0, max: 2 }),
    fails: fc.boolean(),
    cleanup: fc.boolean(),
  }),
  { minLength: 1, maxLength: 30 },
);
type Plan = { undo: boolean; retries: number; fails: boolean; cleanup: boolean }[];

/** The jobs downstream of `id` (its dependents, transitively). */
function downstream(state: FlowState, id: number): Set<number> {
  const out = new Set<number>();
  const pending = [...(state.jobs.get(id)?.dependents ?? [])];
  while (pending.length > 0) {
    const next = pending.pop() as number;
    if (out.has(next)) continue;
    out.add(next);
    pending.push(...(state.jobs.get(next)?.dependents ?? []));
  }
  return out;
}

function unwinds(shape: DagShape, plan: Plan, rate: number): void {
  const rule = (i: number) => plan[i % plan.length] as Plan[number];
  const start = flowOf(
    shapeJobs(shape, (i) => ({
      ...(rule(i).undo ? { compensate: { script: "undo", script_type: "sh", retries: rule(i).retries } } : {}),
      ...(rule(i).cleanup ? { needs: "all_done" as const } : {}),
    })),
    { firstId: 100 },
  );
  const main = start.order.filter((id) => start.jobs.get(id)?.spec.compensates === undefined);
  const failing = new Set(main.filter((_, i) => rule(i).fails && i % 3 === 0));
  const report = simulate(start, shape.seed, {
    fails: (job, _attempt, rnd) =>
      failing.has(job) || (start.jobs.get(job)?.spec.compensates !== undefined && rnd() < rate),
  });
  const { driver: d } = report;
  expect(report.wronglyApplied).toEqual([]);
  expect(d.effects.filter((e) => e.type === "flowEnded")).toHaveLength(1);
  expect(d.effects.filter((e) => e.type === "flowCompensating").length).toBeLessThanOrEqual(1);
  const at = (type: string, job: number) => d.effects.findIndex((e) => e.type === type && "job" in e && e.job === job);
  const wrong: string[] = [];
  for (const id of start.order) {
    const job = d.job(id);
    const ends = d.effects.filter((e) => e.type === "jobEnded" && e.job === id).length;
    if (ends !== 1) wrong.push(`job ${id} ended ${ends} times`);
    const undone = job.spec.compensates;
    if (undone === undefined) continue;
    // At most retries + 1 runs, only of a job that finished, never while the flow ran.
    const runs = d.dispatches.get(id) ?? 0;
    if (runs > job.spec.retries + 1) wrong.push(`compensation ${id} ran ${runs} times`);
    if (runs > 0 && d.job(undone).status !== "finished")
      wrong.push(`compensation ${id} undid a job that did not finish`);
    const first = at("dispatch", id);
    if (first >= 0 && first < d.effects.findIndex((e) => e.type === "flowCompensating"))
      wrong.push(`compensation ${id} ran before the flow unwound`);
    // Reverse order: every compensation of a job downstream of this one's ended before it ran,
    // and well (or this one did not run).
    for (const later of downstream(start, undone)) {
      const other = (d.job(later) as JobState).compensation;
      if (other === undefined || first < 0) continue;
      if (at("jobEnded", other) > first) wrong.push(`compensation ${id} ran before ${other} ended`);
      if (d.job(other).status === "error") wrong.push(`compensation ${id} ran though ${other} failed`);
    }
  }
  expect(wrong).toEqual([]);
  const failed = main.some((id) => d.job(id).status === "error");
  const compensations = start.order.filter((id) => !main.includes(id));
  const failedCompensations = compensations.filter((id) => d.job(id).status === "error");
  const expected = !failed
    ? "finished"
    : compensations.length === 0
      ? "error"
      : failedCompensations.length > 0
        ? "compensation_failed"
        : "compensated";
  expect(d.state.status).toBe(expected);
  if (expected === "compensation_failed")
    expect(d.state.error?.failed_compensations).toEqual(failedCompensations.map((id) => d.job(id).name));
}

describe("random sagas", () => {
  it(
    "unwind in reverse order once, each compensation at most retries + 1 times, and end as they should",
    { timeout: 60_000 },
    () => {
      fc.assert(fc.property(shapes, plans, fc.double({ min: 0, max: 0.6, noNaN: true }), unwinds), { numRuns: 300 });
    },
  );
});
