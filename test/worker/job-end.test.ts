import { afterAll, describe, expect, it } from "vitest";
import { storeFor } from "../../functions/core/store.js";
import { messageId, type FlowState } from "../../shared/flow/index.js";
import { planCommit, type CommitStep } from "../../shared/store/index.js";
import { flowOf, shJob, stepsThrough } from "./flow-fixtures.js";
import { testWorker } from "./harness.js";

// The commit that ends a job writes the job alone (its end guards the section), on real Redis:
// run again after an unknown outcome, it writes nothing twice.

const w = testWorker("job-end");
afterAll(() => w.cleanup());

const store = storeFor(w.env);
const T = Date.now();
const RUNNER = 4;

/** Two independent jobs started, job 1 run to its end: a section per step, in one plan. */
function oneJobEnded(): { state: FlowState; steps: CommitStep[] } {
  return stepsThrough(flowOf(1, [shJob(1, "a"), shJob(2, "b")]), [
    { type: "start", at: T },
    { type: "assigned", job: 1, attempt: 1, runner: RUNNER, at: T + 1 },
    { type: "finished", job: 1, attempt: 1, runner: RUNNER, result: { answer: "42" }, at: T + 2 },
  ]);
}

describe("a job's end", () => {
  it("is written to the job alone, and once, however often its commit runs", async () => {
    const { state, steps } = oneJobEnded();
    const plan = planCommit(store.keys, steps, T + 2);
    expect((await store.flows.commit(plan)).skipped).toEqual([]);
    const job = await w.redis.exec<string[]>(["HGETALL", w.keys.job(1, state.callerId, 1)]);
    const fields = Object.fromEntries(job.flatMap((v, i) => (i % 2 === 0 ? [[v, job[i + 1]]] : [])));
    expect(fields).toMatchObject({ status: "finished", attempt: "1", last_runner_id: String(RUNNER) });
    expect(Number(fields.ended_at)).toBe(Math.floor((T + 2) / 1000));
    const message = w.keys.message(1, state.callerId, messageId(state.jobs.job(1), 1));
    expect(await w.redis.exec<string>(["HGET", message, "status"])).toBe("dispatched");
    expect(await w.redis.exec<number>(["HEXISTS", message, "ended_at"])).toBe(0);

    // A replay: the start's section and the end's are both skipped (the trailing free of the
    // runner's slot is unguarded, and harmless twice).
    expect(plan.sections).toBe(3);
    expect((await store.flows.commit(plan)).skipped).toEqual([1, 2]);
    expect(await w.redis.exec<string[]>(["HGETALL", w.keys.job(1, state.callerId, 1)])).toEqual(job);
  });
});
