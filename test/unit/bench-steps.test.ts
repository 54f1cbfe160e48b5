import { describe, expect, it } from "vitest";
import { timingFigures } from "../../bench/figures.js";
import { STEPS, stepsOf } from "../../bench/steps.js";

// The benchmark's split of a lone job's latency into steps (docs/benchmark.md): the lengths come
// from the benchmark's own times and the times the flow's events carry, and add up to the whole.

const sample = { submitted: 1_000, began: 1_030, answered: 1_060 };
const events = { "flow.created": 1_011, "job.ready": 1_012, "job.dispatched": 1_024, "job.finished": 1_038 };

describe("a lone job's steps", () => {
  it("measures each step between the events that bound it, and they add up to submit → applied", () => {
    const steps = stepsOf(sample, events);
    expect(steps).toEqual({ ready: 12, dispatched: 12, start: 6, reported: 8, applied: 22 });
    const total = STEPS.reduce((sum, step) => sum + (steps?.[step] ?? 0), 0);
    expect(total).toBe(sample.answered - sample.submitted);
    expect((steps?.ready ?? 0) + (steps?.dispatched ?? 0) + (steps?.start ?? 0)).toBe(sample.began - sample.submitted);
  });

  it("leaves out a job whose events are not all there (it was refused, or the stream ended early)", () => {
    expect(stepsOf(sample, { "job.ready": 1_012, "job.finished": 1_038 })).toBeUndefined();
  });

  it("reports each step's median as a figure, and no step figure without samples", () => {
    const figures = timingFigures({
      start: [30, 31, 40],
      applied: [60],
      cpuPerJob: 5,
      steps: { ready: [12, 13, 20], dispatched: [12], start: [6], reported: [8], applied: [22] },
    });
    expect(figures["step.ready.p50"]).toBe(13);
    expect(figures["step.applied.p50"]).toBe(22);
    const bull = timingFigures({ start: [1], applied: [2], cpuPerJob: 1 });
    expect(Object.keys(bull).filter((k) => k.startsWith("step."))).toEqual([]);
  });
});
