import { changesOf } from "../../shared/flow/changes.js";
import {
  apply,
  changedJobs,
  jobJournalOf,
  jobTableCounts,
  newFlowState,
  type DagJob,
  type FlowEvent,
  type FlowState,
} from "../../shared/flow/index.js";

// Flows of any size for what measures how the machine's cost grows with a flow (issue 33): the
// unit test that counts (test/unit/flow-machine-scale.test.ts) and the benchmark's scale rows
// (bench/scale.ts) drive the same shapes the same way.

/** When the flows start (epoch ms). */
const T = 1_700_000_000_000;

/** An sh job of a flow, ready for newFlowState. */
function job(id: number, depends: number[]): DagJob {
  return {
    id,
    name: `j${id}`,
    script: "true",
    script_type: "sh",
    timeout: 60,
    retries: 0,
    env_vars: {},
    prerequisites: [],
    depends,
  };
}

/**
 * A layered DAG of `n` jobs, ids from `firstId`: layers of about √n jobs, each job depending on
 * two of the layer above.
 */
export function layeredJobs(n: number, firstId = 1_000_000): DagJob[] {
  const width = Math.ceil(Math.sqrt(n));
  return Array.from({ length: n }, (_, i) => {
    const layer = Math.floor(i / width);
    const above = (k: number) => firstId + (layer - 1) * width + ((i + k) % width);
    return job(firstId + i, layer > 0 ? [...new Set([above(0), above(1)])] : []);
  });
}

/** One root and `n - 1` jobs that depend on it alone, ids from `firstId`. */
export function fanOutJobs(n: number, firstId = 1_000_000): DagJob[] {
  return Array.from({ length: n }, (_, i) => job(firstId + i, i === 0 ? [] : [firstId]));
}

/** A flow of these jobs, not started. */
export function flowOfJobs(jobs: DagJob[]): FlowState {
  return newFlowState({
    id: 7,
    contextId: 3,
    callerId: 5,
    envVars: {},
    timeouts: { timeout: 300, timeout_ack: 60 },
    traceId: "0af7651916cd43dd8448eb211c80319c",
    jobs,
    messageBase: 5_000_000,
  });
}

/** What running a flow to its end took: transitions, and the job table's reads and node copies. */
export interface RunCost {
  transitions: number;
  reads: number;
  copies: number;
  /** The state it ended in. */
  state: FlowState;
}

/**
 * Runs a flow to its end, every dispatched job in turn taken by a runner and finished (assigned,
 * delivered, started, finished), and counts what the job table did meanwhile. Each transition
 * also derives what the shell does with it that is pure: the stream's changes, and the journal
 * entries of the jobs it changed. Throws on an event that does not apply.
 */
export function runToEnd(start: FlowState): RunCost {
  let state = start;
  const ready: number[] = [];
  let transitions = 0;
  const before = { ...jobTableCounts };
  const send = (event: FlowEvent) => {
    const t = apply(state, event);
    if (t.outcome !== "applied")
      throw new Error(`${event.type} of job ${"job" in event ? event.job : "-"}: ${t.outcome}`);
    changesOf(state, t, event);
    for (const id of changedJobs(state, t.state)) jobJournalOf(t.state.jobs.job(id));
    for (const effect of t.effects) if (effect.type === "dispatch") ready.push(effect.job);
    state = t.state;
    transitions++;
  };
  send({ type: "start", at: T });
  for (let at = T + 1, next = 0; next < ready.length; at += 4) {
    const common = { job: ready[next++] as number, attempt: 1, runner: 1 };
    send({ type: "assigned", ...common, at });
    send({ type: "delivered", ...common, acknowledged: true, at: at + 1 });
    send({ type: "started", ...common, at: at + 2 });
    send({ type: "finished", ...common, result: { out: "1" }, at: at + 3 });
  }
  return {
    transitions,
    reads: jobTableCounts.reads - before.reads,
    copies: jobTableCounts.copies - before.copies,
    state,
  };
}
