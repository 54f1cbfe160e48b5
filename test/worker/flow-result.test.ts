import { afterAll, describe, expect, it } from "vitest";
import { coordinatorKeys } from "../../functions/core/coordinator-key.js";
import { storeFor } from "../../functions/core/store.js";
import { relayMail } from "../../functions/dispatch/mail.js";
import type { FlowState } from "../../shared/flow/index.js";
import { planCommit, type CommitPlan } from "../../shared/store/index.js";
import { resultMessage } from "../../shared/store/flow-records.js";
import { flowOf, shJob, stepsThrough } from "./flow-fixtures.js";
import { testWorker } from "./harness.js";

// A flow's result goes into its caller's inbox in the commit that ends the flow, and onto msg_out
// only for a caller with https addresses, whose relay then only POSTs it. Against real Redis:
// planCommit's script, run (and run again), and the relay of msg_out.

const w = testWorker("flow-result");
afterAll(() => w.cleanup());

const store = storeFor(w.env);
const T = Date.now();
const RUNNER = 4;
const CALLER = 9;
let nextContext = 1;

/** The plan of a flow of one job, from its start to its end, in one batch. */
function endedFlow(notifyHttps: boolean | undefined): { state: FlowState; plan: CommitPlan } {
  const created: FlowState = { ...flowOf(nextContext++, [shJob(1, "a")], { callerId: CALLER }) };
  if (notifyHttps !== undefined) created.notifyHttps = notifyHttps;
  const { state, steps } = stepsThrough(created, [
    { type: "start", at: T },
    { type: "assigned", job: 1, attempt: 1, runner: RUNNER, at: T + 1 },
    { type: "finished", job: 1, attempt: 1, runner: RUNNER, result: { answer: "42" }, at: T + 2 },
  ]);
  return { state, plan: planCommit(store.keys, steps, T + 2) };
}

const inboxKeys = (contextId: number) => w.redis.exec<string[]>(["LRANGE", w.keys.msgIn(contextId, CALLER), "0", "-1"]);
const outbox = (contextId: number) => w.redis.exec<string[]>(["LRANGE", w.keys.msgOut(contextId), "0", "-1"]);
const resultKey = (state: FlowState) => w.keys.message(state.contextId, CALLER, resultMessage(state, T).id);

describe("a flow's result, from the commit that ends the flow", () => {
  it("is in the inbox once, however often the commit runs, and not on msg_out when the caller has no https address", async () => {
    const { state, plan } = endedFlow(false);
    expect(plan.notifies).toBe(false);
    await store.flows.commit(plan);
    await store.flows.commit(plan); // a replay (an unknown outcome, run again) writes nothing twice
    expect(await inboxKeys(state.contextId)).toEqual([resultKey(state)]);
    expect(await outbox(state.contextId)).toEqual([]);
    const [message] = await store.messages.inbox(state.contextId, CALLER, 10, false);
    expect(message).toMatchObject({ status: "acknowledged", flow_result: { flow_id: 1, status: "finished" } });
  });

  it("is relayed too when the caller has (or may have) https addresses, and the relay does not put it in the inbox again", async () => {
    for (const notifyHttps of [true, undefined]) {
      const { state, plan } = endedFlow(notifyHttps);
      expect(plan.notifies).toBe(true);
      await store.flows.commit(plan);
      await store.flows.commit(plan);
      expect(await outbox(state.contextId)).toEqual([resultKey(state)]);
      // The caller (actor 9) is not registered: nothing to POST to, and the relay settles it.
      const key = (await coordinatorKeys(w.env)).current;
      expect((await relayMail(store, key, state.contextId, 10)).taken).toBe(1);
      expect(await inboxKeys(state.contextId)).toEqual([resultKey(state)]);
      expect(await outbox(state.contextId)).toEqual([]);
      expect(await w.redis.exec<number>(["ZCARD", w.keys.inflight(state.contextId)])).toBe(0);
    }
  });
});
