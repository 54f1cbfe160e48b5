import { runInDurableObject } from "cloudflare:test";
import { afterAll, describe, expect, it } from "vitest";
import { PendingCommits } from "../../functions/flow/pending.js";
import { testWorker } from "./harness.js";

// The write-ahead record of a flow's commit, in a Durable Object's own storage.

const w = testWorker("pending");
afterAll(() => w.cleanup());

describe("PendingCommits", () => {
  it("keeps a plan larger than a storage value (chunked) until it is cleared", async () => {
    const { stub } = w.flowStub(1, 424242);
    const plan = {
      keys: ["k1", "k2"],
      args: Array.from({ length: 3_000 }, (_, i) => `${i}:${"x".repeat(700)}`),
      queued: [{ key: "q", flow: 1, scriptType: "sh" as const, priority: 0 }],
      freed: [3, 4],
      notifies: false,
    };
    expect(JSON.stringify(plan).length).toBeGreaterThan(2_000_000);
    await runInDurableObject(stub, async (_instance, state) => {
      const pending = new PendingCommits(state.storage);
      expect(await pending.read()).toBeUndefined();
      await pending.write(plan);
      expect(await pending.read()).toEqual(plan);
      await pending.write({ ...plan, args: ["small"] }); // a later plan replaces it whole
      expect(await pending.read()).toEqual({ ...plan, args: ["small"] });
      await pending.clear();
      expect(await pending.read()).toBeUndefined();
      expect([...(await state.storage.list({ prefix: "pending" })).keys()]).toEqual([]);
    });
  });

  it("makes its table again after a wipe drops it, once told to forget", async () => {
    const { stub } = w.flowStub(1, 424243);
    const plan = { keys: ["k"], args: ["a"], queued: [], freed: [], notifies: false };
    await runInDurableObject(stub, async (_instance, state) => {
      const pending = new PendingCommits(state.storage);
      await pending.write(plan);
      await state.storage.deleteAll(); // what wipeStorage does: the table goes with the keys
      // Known to exist, so not made again: the write fails until the part forgets (flow-object.ts parts).
      await expect(pending.write(plan)).rejects.toThrow(/no such table/);
      pending.forget();
      await pending.write(plan);
      expect(await pending.read()).toEqual(plan);
    });
  });
});
