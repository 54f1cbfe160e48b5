import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { askOwners } from "../../functions/core/stubs.js";
import { workItem } from "../../shared/keys.js";
import type { DeliveryPayload, RunnerJob } from "../../shared/model/index.js";
import type { CoordinatorClient } from "../../shared/client/index.js";
import { BASE, testWorker } from "./harness.js";

// askOwners against the real FlowCoordinators: a round's claims go to each flow's object in one
// call, and each claim is answered on its own, in the order asked, whatever its neighbours' fate.

const w = testWorker("owners");
afterAll(() => w.cleanup());

let client: CoordinatorClient;
beforeAll(async () => {
  client = (await w.newActor()).client;
});

describe("askOwners", () => {
  it("answers each item in order: delivered, gone for what is no work item, no flow or no such attempt", async () => {
    // No runner is registered: the flow's two jobs wait in its queue, and no round claims them.
    const ctx = (await client.createContext()).id;
    const flow = await client.submitFlow(ctx, {
      start: true,
      jobs: ["a", "b"].map((name) => ({ name, script: `echo ${name}`, script_type: "sh" as const })),
    });
    const itemOf = async (key: string, attempt = 1, flowId = flow.id) => {
      const id = flow.jobs.find((j) => j.key === key)?.id as number;
      const job = (await client.request("GET", `/v1/contexts/${ctx}/jobs/${flow.caller_id}/${id}`)) as RunnerJob;
      const messageKey = w.keys.message(ctx, flow.caller_id, (job.message_base as number) + attempt - 1);
      return workItem({ messageKey, flowId, jobId: id, attempt });
    };
    const items = [
      await itemOf("a"),
      "not a work item",
      await itemOf("a", 1, flow.id + 100), // a flow that does not exist
      await itemOf("b"),
      await itemOf("b", 2), // an attempt b never had
    ];
    const base = { prefix: w.env.KEY_PREFIX as string, contextId: ctx, origin: BASE };
    const answers = await askOwners(w.env, base, items, { id: 77, address: "", perPost: 1, pubkey: "" });

    expect(answers.map((a) => (a instanceof Error ? "error" : a.outcome))).toEqual([
      "delivered",
      "gone",
      "gone",
      "delivered",
      "gone",
    ]);
    const payloads = answers.map((a) => (a instanceof Error || a.outcome !== "delivered" ? undefined : a.payload));
    expect(payloads.map((p?: DeliveryPayload) => p?.message.job[0]?.name)).toEqual([
      "a",
      undefined,
      undefined,
      "b",
      undefined,
    ]);
    // Asked again (a reaped claim, a lost lease answer), they were handed out already.
    const again = await askOwners(w.env, base, [items[0] as string, items[3] as string], {
      id: 77,
      address: "",
      perPost: 1,
      pubkey: "",
    });
    expect(again).toEqual([{ outcome: "delivered" }, { outcome: "delivered" }]);
    const view = await client.loadFlow(ctx, flow.id);
    expect(view.jobs.map((j) => [j.key, j.runner_id])).toEqual([
      ["a", 77],
      ["b", 77],
    ]);
  });
});
