import { runInDurableObject } from "cloudflare:test";
import { afterAll, describe, expect, it } from "vitest";
import { FlowJournal } from "../../functions/flow/journal.js";
import { journalOf, type FlowEvent, type FlowState } from "../../shared/flow/index.js";
import { flowOf, shJob, through } from "./flow-fixtures.js";
import { testWorker } from "./harness.js";

// The flow's journal in a real Durable Object's storage: one key per job in progress, a commit
// writing only the jobs it changed, and the whole journal whenever storage may hold another state.

const w = testWorker("journal");
afterAll(() => w.cleanup());

const T = Date.now();
const RUNNER = 4;
let nextContext = 1;

const start: FlowEvent = { type: "start", at: T };
const assigned = (job: number): FlowEvent => ({ type: "assigned", job, attempt: 1, runner: RUNNER, at: T + 10 });
const finished = (job: number): FlowEvent => ({
  type: "finished",
  job,
  attempt: 1,
  runner: RUNNER,
  result: { done: String(job) },
  at: T + 20,
});

/** Storage that records the keys each put and delete touched, passing every call on. */
function recording(storage: DurableObjectStorage) {
  const touched: { put: string[]; deleted: string[] } = { put: [], deleted: [] };
  const wrapped = new Proxy(storage, {
    get(target, name) {
      if (name === "put")
        return (entries: Record<string, unknown>) => {
          touched.put.push(...Object.keys(entries));
          return target.put(entries);
        };
      if (name === "delete")
        return (keys: string[]) => {
          touched.deleted.push(...keys);
          return target.delete(keys);
        };
      const value = Reflect.get(target, name) as unknown;
      return typeof value === "function" ? (value as (...a: unknown[]) => unknown).bind(target) : value;
    },
  });
  return { storage: wrapped, touched };
}

/** A flow of three independent jobs (ids 1..3), its object's stub. */
function newFlow(): { state: FlowState; stub: ReturnType<typeof w.flowStub>["stub"] } {
  const contextId = nextContext++;
  const state = flowOf(contextId, [shJob(1, "a"), shJob(2, "b"), shJob(3, "c")]);
  return { state, stub: w.flowStub(contextId, 1).stub };
}

describe("FlowJournal", () => {
  it("writes only the jobs a batch changed, and drops a job once it ended", async () => {
    const { state, stub } = newFlow();
    await runInDurableObject(stub, async (_instance, ds) => {
      const { storage, touched } = recording(ds.storage);
      const journal = new FlowJournal(storage);
      const started = through(state, [start]);
      await journal.write(state, started);
      expect(touched.put.sort()).toEqual(["journal:1", "journal:2", "journal:3"]);
      expect(await journal.read()).toEqual(journalOf(started));

      touched.put = [];
      touched.deleted = [];
      const one = through(started, [assigned(1)]);
      await journal.write(started, one);
      expect(touched).toEqual({ put: ["journal:1"], deleted: [] });

      const done = through(one, [finished(1)]);
      await journal.write(one, done);
      expect(touched.deleted).toEqual(["journal:1"]);
      expect(await journal.read()).toEqual(journalOf(done));
      expect(Object.keys(await journal.read())).toEqual(["2", "3"]);
    });
  });

  it("writes the whole journal, dropping what storage held of other states, when the batch began elsewhere", async () => {
    const { state, stub } = newFlow();
    await runInDurableObject(stub, async (_instance, ds) => {
      const started = through(state, [start]);
      const first = new FlowJournal(ds.storage);
      await first.write(state, started);
      const done = through(started, [assigned(2), finished(2), assigned(3), finished(3)]);
      await first.write(started, done);
      expect(Object.keys(await first.read())).toEqual(["1"]);

      // Another object (memory lost, read back) holds the flow as it was at the start: a batch
      // from there cannot be a diff against what storage holds.
      const { storage, touched } = recording(ds.storage);
      const second = new FlowJournal(storage);
      const other = through(started, [assigned(1)]);
      await second.write(started, other);
      expect(touched.put.sort()).toEqual(["journal:1", "journal:2", "journal:3"]);
      expect(await second.read()).toEqual(journalOf(other));

      // The same object after a batch it did not write (a conflict): the next write is whole again.
      touched.put = [];
      await second.write(started, through(started, [assigned(3)]));
      expect(touched.put).toHaveLength(3);
    });
  });
});
