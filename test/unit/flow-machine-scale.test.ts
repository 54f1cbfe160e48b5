import { describe, expect, it } from "vitest";
import { changesOf } from "../../shared/flow/changes.js";
import {
  apply,
  changedJobs,
  jobTableCounts,
  type FlowEvent,
  type FlowState,
  type Transition,
} from "../../shared/flow/index.js";
import { jobJournalOf } from "../../shared/flow/rebuild.js";
import { flowOf, jobIn, T, type JobIn } from "./flow-sim.js";

// A transition costs the jobs it changes, not the flow (issue 33): run flows of 100, 1,000 and
// 10,000 jobs through the pure machine to their end, every job through its whole life (assigned,
// delivered, started, finished), and count what the job table did — jobs read and trie nodes
// copied — per job. Counting, not timing: the counts are exact and the same on any machine. The
// per-transition work of the shell that is pure (the stream's changes, the journal's entries of
// the changed jobs) runs in the same loop and is counted with it. Before the table, every
// transition copied the whole jobs record: the copies per job grew with the flow (10,000 jobs:
// some 40,000 transitions × 10,000 entries).

/** A layered DAG of `n` jobs: layers of about √n jobs, each job depending on two of the layer above. */
function layered(n: number): JobIn[] {
  const width = Math.ceil(Math.sqrt(n));
  return Array.from({ length: n }, (_, i) => {
    const layer = Math.floor(i / width);
    const above = (k: number) => `j${(layer - 1) * width + ((i + k) % width)}`;
    return jobIn({ name: `j${i}`, ...(layer > 0 ? { depends: [...new Set([above(0), above(1)])] } : {}) });
  });
}

/** One root and `n - 1` jobs that depend on it alone. */
function fanOut(n: number): JobIn[] {
  return [jobIn({ name: "root" }), ...Array.from({ length: n - 1 }, () => jobIn({ depends: ["root"] }))];
}

interface Cost {
  transitions: number;
  reads: number;
  copies: number;
}

/**
 * Runs a flow to its end, each dispatched job in turn taken by a runner and finished, and counts
 * the table's reads and copies along the way (the flow's creation not counted: it makes every job
 * once, linear by construction).
 */
function runToEnd(inputs: JobIn[]): Cost {
  // Ids from a million on, as a busy caller's are: the trie is as deep for every size.
  let state: FlowState = flowOf(inputs, { firstId: 1_000_000 });
  const ready: number[] = [];
  let transitions = 0;
  const before = { ...jobTableCounts };
  const send = (event: FlowEvent): Transition => {
    const t = apply(state, event);
    expect(t.outcome).toBe("applied");
    changesOf(state, t, event);
    for (const id of changedJobs(state, t.state)) jobJournalOf(t.state.jobs.job(id));
    for (const effect of t.effects) if (effect.type === "dispatch") ready.push(effect.job);
    state = t.state;
    transitions++;
    return t;
  };
  send({ type: "start", at: T });
  for (let at = T + 1; ready.length > 0; at += 4) {
    const job = ready.shift() as number;
    const common = { job, attempt: 1, runner: 1 };
    send({ type: "assigned", ...common, at });
    send({ type: "delivered", ...common, acknowledged: true, at: at + 1 });
    send({ type: "started", ...common, at: at + 2 });
    send({ type: "finished", ...common, result: { out: "1" }, at: at + 3 });
  }
  expect(state.status).toBe("finished");
  expect(state.jobs.size).toBe(inputs.length);
  return {
    transitions,
    reads: jobTableCounts.reads - before.reads,
    copies: jobTableCounts.copies - before.copies,
  };
}

const SIZES = [100, 1_000, 10_000] as const;

describe.each([
  ["a layered DAG", layered],
  ["a wide fan-out", fanOut],
] as const)("the machine's cost per job in %s", (_, shape) => {
  it("stays flat from 100 to 10,000 jobs", () => {
    const perJob = SIZES.map((n) => {
      const cost = runToEnd(shape(n));
      // Five transitions a job (four of its own, the start and its dispatch shared out).
      expect(cost.transitions).toBeLessThanOrEqual(4 * n + 1);
      return { n, reads: cost.reads / n, copies: cost.copies / n };
    });
    const [small, , large] = perJob as [(typeof perJob)[number], unknown, (typeof perJob)[number]];
    // A copy is one trie node per level of the job's path; the trie is 4 levels deep for ids
    // around a million, and each of a job's 4 transitions writes it once.
    expect(large.copies).toBeLessThanOrEqual(4 * 4 + 4);
    expect(large.copies / small.copies).toBeLessThan(1.5);
    expect(large.reads / small.reads).toBeLessThan(1.5);
    // What it was for: before, a transition copied every job. Ten thousand jobs' worth per job
    // is what a flat cost rules out.
    expect(large.reads + large.copies).toBeLessThan(200);
  });
});
