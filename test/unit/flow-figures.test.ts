import { describe, expect, it } from "vitest";
import { DURATION_BUCKETS, flowFigures, LATENCY_BUCKETS } from "../../shared/flow/figures.js";
import type { FlowState, JobState } from "../../shared/flow/index.js";
import { JobTable } from "../../shared/flow/job-table.js";
import { flowOf, jobIn } from "./flow-sim.js";

// The figures a flow's end adds to its context's /metrics: which jobs count (those that ran in
// this run), by final status, retries, and the latency and duration histograms.

/** A flow of `n` jobs (ids 100…), each changed by `edit` (indexed from 0). */
function flowWith(n: number, edit: (job: JobState, i: number) => Partial<JobState>): FlowState {
  const state = flowOf(Array.from({ length: n }, (_, i) => jobIn({ name: `j${i}` })));
  const jobs = state.order.map((id, i) => {
    const job = state.jobs.job(id);
    return { ...job, ...edit(job, i) };
  });
  return { ...state, jobs: JobTable.of(jobs), status: "finished" };
}

const zeros = (bounds: readonly number[]) => new Array<number>(bounds.length + 1).fill(0);

describe("flowFigures", () => {
  it("is undefined when no job ran in this run", () => {
    expect(flowFigures(flowWith(3, () => ({})))).toBeUndefined();
    // A re-run that ran nothing new: the attempts all belong to the run before.
    expect(flowFigures(flowWith(2, () => ({ attempt: 2, attemptFloor: 2, status: "finished" })))).toBeUndefined();
  });

  it("counts the jobs that ran by final status, and the attempts beyond each one's first as retries", () => {
    const statuses = ["finished", "finished", "error", "started", "waiting_for_prerequisites"] as const;
    const figures = flowFigures(
      flowWith(5, (_, i) =>
        i === 4
          ? {} // never ran: cancelled before its dependencies finished
          : { status: statuses[i] as JobState["status"], attempt: [1, 3, 2, 1][i] as number },
      ),
    );
    expect(figures).toMatchObject({ finished: 2, error: 1, stopped: 1, retries: 2 + 1 });
  });

  it("counts only this run's attempts after a re-run", () => {
    const figures = flowFigures(
      flowWith(
        2,
        (_, i) =>
          i === 0
            ? { status: "finished", attempt: 2, attemptFloor: 2, latencyMs: 5, durationMs: 5 } // kept from the first run
            : { status: "finished", attempt: 4, attemptFloor: 2, latencyMs: 40, durationMs: 700 }, // ran twice now
      ),
    );
    expect(figures).toMatchObject({ finished: 1, error: 0, retries: 1, latency_ms: 40, duration_ms: 700 });
  });

  it("puts each latency and duration in the first bucket whose bound (inclusive) holds it, sums them in ms", () => {
    const latencies = [0, 25, 26, 1000, 299_999, 300_001, 10 ** 9];
    const durations = [100, 101, 3_600_000, 3_600_001, 2.6];
    const figures = flowFigures(
      flowWith(latencies.length, (_, i) => ({
        status: "finished",
        attempt: 1,
        latencyMs: latencies[i] as number,
        ...(i < durations.length ? { durationMs: durations[i] as number } : {}),
      })),
    );
    const latency = zeros(LATENCY_BUCKETS);
    for (const [bound, n] of [
      [0.025, 2],
      [0.05, 1],
      [1, 1],
      [300, 1],
    ] as const)
      latency[LATENCY_BUCKETS.indexOf(bound)] = n;
    latency[LATENCY_BUCKETS.length] = 2; // +Inf
    const duration = zeros(DURATION_BUCKETS);
    duration[DURATION_BUCKETS.indexOf(0.1)] = 2; // 2.6 rounds to 3 ms
    duration[DURATION_BUCKETS.indexOf(0.25)] = 1;
    duration[DURATION_BUCKETS.indexOf(3600)] = 1;
    duration[DURATION_BUCKETS.length] = 1;
    expect(figures?.latency).toEqual(latency);
    expect(figures?.duration).toEqual(duration);
    expect(figures?.latency_ms).toBe(latencies.reduce((a, b) => a + b, 0));
    expect(figures?.duration_ms).toBe(100 + 101 + 3_600_000 + 3_600_001 + 3);
  });

  it("leaves jobs without timings out of the histograms but counts them", () => {
    const figures = flowFigures(
      flowWith(3, (_, i) => ({ status: "finished", attempt: 1, ...(i === 0 ? { latencyMs: 7 } : {}) })),
    );
    expect(figures?.finished).toBe(3);
    expect(figures?.latency.reduce((a, b) => a + b, 0)).toBe(1);
    expect(figures?.duration).toEqual(zeros(DURATION_BUCKETS));
  });

  it("is a compact record: counts per bucket, no raw values, whatever the number of jobs", () => {
    const figures = flowFigures(
      flowWith(1000, (_, i) => ({ status: "finished", attempt: 1, latencyMs: i * 37, durationMs: i * 91 })),
    );
    expect(JSON.stringify(figures).length).toBeLessThan(250);
    expect(figures?.latency.reduce((a, b) => a + b, 0)).toBe(1000);
  });
});
