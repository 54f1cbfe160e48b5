import { describe, expect, it } from "vitest";
import type { DagJob } from "../../shared/flow/index.js";
import { fanOutJobs, flowOfJobs, layeredJobs, runToEnd } from "../support/flow-scale.js";

// A transition costs the jobs it changes, not the flow (issue 33): run flows of 100, 1,000 and
// 10,000 jobs through the pure machine to their end, every job through its whole life (assigned,
// delivered, started, finished), and count what the job table did — jobs read and trie nodes
// copied — per job. Counting, not timing: the counts are exact and the same on any machine. The
// per-transition work of the shell that is pure (the stream's changes, the journal's entries of
// the changed jobs) runs in the same loop and is counted with it. Before the table, every
// transition copied the whole jobs record: the copies per job grew with the flow (10,000 jobs:
// some 40,000 transitions × 10,000 entries); a walk over every job at each transition would show
// as reads growing the same way.

const SIZES = [100, 1_000, 10_000] as const;

describe.each([
  ["a layered DAG", layeredJobs],
  ["a wide fan-out", fanOutJobs],
] as const)("the machine's cost per job in %s", (_, shape: (n: number) => DagJob[]) => {
  it("stays flat from 100 to 10,000 jobs", () => {
    const perJob = SIZES.map((n) => {
      const cost = runToEnd(flowOfJobs(shape(n)));
      expect(cost.state.status).toBe("finished");
      expect(cost.state.jobs.size).toBe(n);
      // Four transitions a job (assigned, delivered, started, finished), and the start.
      expect(cost.transitions).toBe(4 * n + 1);
      return { n, reads: cost.reads / n, copies: cost.copies / n };
    });
    const [small, , large] = perJob as [(typeof perJob)[number], unknown, (typeof perJob)[number]];
    // A copy is one trie node per level of the job's path: the trie is 4 levels deep for ids
    // around a million (as for every size here), and each of a job's 4 transitions writes it once.
    expect(large.copies).toBeLessThanOrEqual(4 * 4 + 4);
    expect(large.copies / small.copies).toBeLessThan(1.5);
    expect(large.reads / small.reads).toBeLessThan(1.5);
    // What it is for: before, a transition copied every job. Thousands of jobs' worth per job
    // is what a flat cost rules out.
    expect(large.reads + large.copies).toBeLessThan(200);
    // Counts, not time: the 10,000-job run takes about a second alone, and more beside other files.
  }, 60_000);
});
