import { afterAll, describe, expect, it } from "vitest";
import { storeFor } from "../../functions/core/store.js";
import type { FlowEvent, FlowState, JobState } from "../../shared/flow/index.js";
import { planCommit } from "../../shared/store/index.js";
import { flowOf, shJob, stepsThrough, through } from "./flow-fixtures.js";
import { testWorker } from "./harness.js";

// The supervisor's sweep is the backstop of every flow's own alarm. A commit that starts a
// flow's deadlines (a start, a re-run) makes the flow's context due in the sweep's set itself,
// in the same script call as the start: on real Redis, whatever becomes of the object after.

const w = testWorker("sweep-due");
afterAll(() => w.cleanup());

const store = storeFor(w.env);
const T = Date.now();
const RUNNER = 4;

let nextContext = 1;

/** A new flow of one job (id 1), delivery timeout `timeout` s, in a context of its own. */
function newFlow(timeout = 300): FlowState {
  return flowOf(nextContext++, [shJob(1, "a")], { timeout });
}

/** Commits `events` applied to `before` on Redis, as one batch; the state after. */
async function commit(before: FlowState, events: FlowEvent[], at = T): Promise<FlowState> {
  const { state, steps } = stepsThrough(before, events);
  await store.flows.commit(planCommit(store.keys, steps, at));
  return state;
}

/** When the sweep is to look at a context next (epoch ms), or null. */
async function sweepDue(contextId: number): Promise<number | null> {
  const score = await w.redis.exec<string | null>(["ZSCORE", w.keys.sweepDue(), String(contextId)]);
  return score === null ? null : Number(score);
}

const start: FlowEvent = { type: "start", at: T };

describe("a commit that starts a flow's deadlines", () => {
  it("makes its context due in the sweep's set no later than the flow's nearest deadline", async () => {
    const fresh = newFlow();
    const later = newFlow();
    const earlier = newFlow();
    const short = newFlow(30);
    await w.redis.exec(["ZADD", w.keys.sweepDue(), String(T + 1e9), String(later.contextId)]);
    await w.redis.exec(["ZADD", w.keys.sweepDue(), String(T + 1_000), String(earlier.contextId)]);
    for (const state of [fresh, later, earlier, short]) await commit(state, [start]);
    expect(await sweepDue(fresh.contextId)).toBe(T + 300_000);
    expect(await sweepDue(later.contextId)).toBe(T + 300_000); // moved up to the deadline
    expect(await sweepDue(earlier.contextId)).toBe(T + 1_000); // an earlier check stands
    expect(await sweepDue(short.contextId)).toBe(T + 30_000);
  });

  it("does so again for a re-run, and not for other batches", async () => {
    const state = newFlow();
    const running = through(state, [start, { type: "assigned", job: 1, attempt: 1, runner: RUNNER, at: T + 10 }]);
    const failed = await commit(running, [
      { type: "failed", job: 1, attempt: 1, runner: RUNNER, error: "boom", at: T + 20, random: 0.5 },
    ]);
    expect(failed.status).toBe("error");
    expect(await sweepDue(state.contextId)).toBeNull();

    const rerun = await commit(failed, [{ type: "rerun", bases: { 1: 200 }, at: T + 60_000 }], T + 60_000);
    expect(rerun.jobs[1]).toMatchObject<Partial<JobState>>({ status: "dispatched", attempt: 2 });
    expect(await sweepDue(state.contextId)).toBe(T + 60_000 + 300_000);
  });
});
