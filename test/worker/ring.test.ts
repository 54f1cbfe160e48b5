import { runInDurableObject } from "cloudflare:test";
import { afterAll, describe, expect, it } from "vitest";
import { ReadyRing } from "../../functions/dispatch/ring.js";
import type { ReadyQueue } from "../../shared/store/index.js";
import { testWorker } from "./harness.js";

// The Dispatcher's ring in a real Durable Object's storage: turn order (priority, then turns),
// what survives the object's memory, and the one race it must win: a queue found empty by a
// claim while a wake (or work put back) named it again stays in the ring; and which flows wait
// in it, as commits are told (dispatch_waiting).

const w = testWorker("ring");
afterAll(() => w.cleanup());

/** A ring over `storage` whose marks of `dispatch_waiting` are kept in `marks`. */
function ringOver(storage: DurableObjectStorage, marks: string[] = []): ReadyRing {
  return new ReadyRing(storage, {
    markWaiting: async (value) => {
      marks.push(value);
    },
  });
}

const queue = (flow: number, priority = 0, extra: Partial<ReadyQueue> = {}): ReadyQueue => ({
  key: `q:${flow}`,
  flow,
  scriptType: "sh",
  priority,
  ...extra,
});

describe("the ring", () => {
  it("orders by priority, then by turn; a served queue goes to the back of its priority", async () => {
    await runInDurableObject(w.dispatcherStub(901), async (_instance, ds) => {
      const ring = ringOver(ds.storage);
      await ring.add([queue(1), queue(2), queue(3, 5), queue(4)]);
      expect((await ring.ordered()).map((q) => q.flow)).toEqual([3, 1, 2, 4]);
      ring.served(["q:1"]);
      expect((await ring.ordered()).map((q) => q.flow)).toEqual([3, 2, 4, 1]);
      // A flow's new priority moves its queue.
      await ring.add([queue(4, 9)]);
      expect((await ring.ordered()).map((q) => [q.flow, q.priority])).toEqual([
        [4, 9],
        [3, 5],
        [2, 0],
        [1, 0],
      ]);
      // Another object over the same storage (memory gone) knows the same queues.
      const again = ringOver(ds.storage);
      expect(new Set((await again.ordered()).map((q) => q.flow))).toEqual(new Set([1, 2, 3, 4]));
      expect((await again.ordered()).find((q) => q.flow === 4)?.priority).toBe(9);
    });
  });

  it("drops a queue a claim found empty only if nobody named it since the claim saw it", async () => {
    await runInDurableObject(w.dispatcherStub(902), async (_instance, ds) => {
      const ring = ringOver(ds.storage);
      await ring.add([queue(1), queue(2)]);
      const seen = await ring.ordered();
      const version = (flow: number) => seen.find((q) => q.flow === flow)?.version ?? -1;
      // While the claim ran, work was put back into queue 2 (a refusal) and named again.
      await ring.add([queue(2)]);
      await ring.drop([
        { key: "q:1", version: version(1) },
        { key: "q:2", version: version(2) },
      ]);
      expect((await ring.ordered()).map((q) => q.flow)).toEqual([2]);
      expect(await ringOver(ds.storage).keys()).toEqual(["q:2"]);
      // Dropped, then named again: back in the ring, at the back.
      await ring.add([queue(1)]);
      expect((await ring.ordered()).map((q) => q.flow)).toEqual([2, 1]);
    });
  });

  it("tells commits which flows wait: none, one flow's id, or several; written only when that changes", async () => {
    await runInDurableObject(w.dispatcherStub(903), async (_instance, ds) => {
      const marks: string[] = [];
      const ring = ringOver(ds.storage, marks);
      await ring.mark();
      await ring.add([queue(7)]);
      await ring.mark();
      // Another queue of the same flow: still that flow alone, nothing written.
      await ring.add([{ ...queue(7), key: "q:7:python", scriptType: "python" }]);
      await ring.mark();
      await ring.add([queue(8)]);
      await ring.mark();
      expect(marks).toEqual(["none", "7", "*"]);
      const seen = await ring.ordered();
      await ring.drop(seen.filter((q) => q.flow === 8).map((q) => ({ key: q.key, version: q.version })));
      await ring.mark();
      await ring.drop(seen.map((q) => ({ key: q.key, version: q.version })));
      await ring.mark();
      expect(marks).toEqual(["none", "7", "*", "7", "none"]);
      // A fresh instance does not know what was written last: its first mark writes.
      const fresh: string[] = [];
      await ringOver(ds.storage, fresh).mark();
      expect(fresh).toEqual(["none"]);
    });
  });

  it("writes again after a mark failed (storage away): the value is not known until one goes through", async () => {
    await runInDurableObject(w.dispatcherStub(904), async (_instance, ds) => {
      const marks: string[] = [];
      let fail = true;
      const ring = new ReadyRing(ds.storage, {
        markWaiting: async (value) => {
          if (fail) throw new Error("storage away");
          marks.push(value);
        },
      });
      await ring.add([queue(3)]);
      await expect(ring.mark()).rejects.toThrow("storage away");
      fail = false;
      await ring.mark();
      expect(marks).toEqual(["3"]);
    });
  });
});
