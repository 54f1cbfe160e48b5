import { runInDurableObject } from "cloudflare:test";
import { describe, expect, it } from "vitest";
import { GroupCommit } from "../../functions/flow/group-commit.js";
import { PendingCommits } from "../../functions/flow/pending.js";
import { FlowJournal } from "../../functions/flow/journal.js";
import { journalOf, type FlowState } from "../../shared/flow/index.js";
import { NotFoundError, WAITING_NONE } from "../../shared/store/index.js";
import { assignmentsOf } from "../../functions/flow/own-claims.js";
import { pushRunner } from "./flow-fixtures.js";
import { assigned, finished, groupCommitFixture, RUNNER, start, T } from "./group-commit-fixtures.js";

// GroupCommit on its own (group-commit-fixtures.ts): events that arrive together meet in one
// batch, a commit's claims are assigned in it, duplicates write nothing, and a flow that is not
// there fails its callers. What it does when storage fails: group-commit-faults.test.ts.

const { w, store, newContextId, newFlow, hostFor, queued, flowField, jobField } = groupCommitFixture("group-commit");

describe("GroupCommit", () => {
  it("writes the events that arrive while a batch is in flight together, as the next batch", async () => {
    const { state, scope, stub } = await newFlow();
    await runInDurableObject(stub, async (_instance, ds) => {
      let planned!: () => void;
      const planning = new Promise<void>((resolve) => (planned = resolve));
      const { host, told } = hostFor(ds.storage, scope, { store, onStore: (call) => call === 1 && planned() });
      const commits = new GroupCommit(host);
      commits.adopt(state);

      const first = commits.enqueue(start);
      await planning; // the first batch is cut and on its way to Redis
      const later = [assigned(1), assigned(2), finished(1), finished(2)].map((e) => commits.enqueue(e));
      const answers = await Promise.all([first, ...later]);

      expect(answers.map((t) => t.outcome)).toEqual(["applied", "applied", "applied", "applied", "applied"]);
      // Two batches, each one script call: the start alone, then the four that waited for it.
      expect(told.committed.map((b) => b.steps.length)).toEqual([1, 4]);
      expect(told.committed.every((b) => b.plan !== undefined && !b.conflict)).toBe(true);
      // Per batch: one store() call to plan it, one for its single commitFlow call.
      expect(told.storeCalls).toBe(4);
      // The second batch's script wrote both finished jobs (a section each) and freed their slot.
      expect(told.committed[1]?.plan).toMatchObject({ sections: 3, queued: [], freed: [RUNNER] });
      expect(told.committed[1]?.before).toBe(told.committed[0]?.after);

      expect(await flowField(state, "status")).toBe("started");
      expect(await queued(state)).toBe(3);
      expect([await jobField(state, 1, "status"), await jobField(state, 2, "status")]).toEqual([
        "finished",
        "finished",
      ]);
      expect(await jobField(state, 3, "status")).toBe("dispatched");
      const now = commits.current as FlowState;
      expect(now.jobs.get(3)?.status).toBe("dispatched");
      expect(await new FlowJournal(ds.storage).read()).toEqual(journalOf(now));
      expect(await new PendingCommits(ds.storage).read()).toBeUndefined();
      expect(told.down).toBe(0);
    });
  });

  it("claims the work a commit queues in its own script call, and assigns it in the same batch", async () => {
    const { state, scope, stub } = await newFlow();
    const runner = await store.runners.create(pushRunner(state.contextId, { concurrency: 2 }));
    await w.redis.exec(["HSET", w.keys.context(state.contextId), "dispatch_waiting", WAITING_NONE]);
    await runInDurableObject(stub, async (_instance, ds) => {
      const { host, told } = hostFor(ds.storage, scope, { store });
      let claiming = 0;
      const commits = new GroupCommit({
        ...host,
        claims: (_state, commit) => commit.queued.map((queue) => ({ queue, candidates: [runner.id] })),
        claiming: async () => void claiming++,
        assignments: (outcome) => assignmentsOf(outcome.claimed),
      });
      commits.adopt(state);
      await commits.enqueue(start);

      // One batch, one script call: a, b and c queued, two of them claimed (the runner's room).
      expect(told.committed).toHaveLength(1);
      expect(claiming).toBe(1);
      const claimed = told.committed[0]?.outcome?.claimed ?? [];
      expect(claimed.map((c) => [c.runner.id, c.items.length, c.full, c.drained])).toEqual([
        [runner.id, 2, true, false],
      ]);
      expect(await queued(state)).toBe(1);
      // The claimed attempts are assigned in memory, in the journal and on the stream by this batch.
      const now = commits.current as FlowState;
      expect([1, 2, 3].map((id) => now.jobs.get(id)?.delivery?.state)).toEqual(["assigned", "assigned", undefined]);
      expect(told.published.filter((t) => t === "job.dispatched")).toHaveLength(2);
      expect(await new FlowJournal(ds.storage).read()).toEqual(journalOf(now));
      expect(await new PendingCommits(ds.storage).read()).toBeUndefined();
    });
  });

  it("answers a duplicate event 'duplicate' and writes nothing", async () => {
    const { state, scope, stub } = await newFlow();
    await runInDurableObject(stub, async (_instance, ds) => {
      const { host, told } = hostFor(ds.storage, scope, { store });
      const commits = new GroupCommit(host);
      commits.adopt(state);
      await commits.enqueue(start);
      await commits.enqueue(assigned(1));
      await commits.enqueue(finished(1));
      const journal = await new FlowJournal(ds.storage).read();
      const calls = told.storeCalls;
      const batches = told.committed.length;
      const after = commits.current;

      const replays = await Promise.all([
        commits.enqueue({ ...start, at: T + 99 }),
        commits.enqueue(assigned(1)),
        commits.enqueue({ ...finished(1), at: T + 99 }),
      ]);
      expect(replays.map((t) => t.outcome)).toEqual(["duplicate", "duplicate", "duplicate"]);
      expect(replays.every((t) => t.state === after && t.effects.length === 0)).toBe(true);
      // Nothing planned, no script call, no effects owed, nothing new in storage.
      expect(told.storeCalls).toBe(calls);
      expect(told.committed.length).toBe(batches);
      expect(commits.current).toBe(after);
      expect(await new FlowJournal(ds.storage).read()).toEqual(journal);
      expect(await new PendingCommits(ds.storage).read()).toBeUndefined();
      expect(await queued(state)).toBe(3);
      expect(await jobField(state, 1, "status")).toBe("finished");
    });
  });

  it("fails the callers with not-found when there is no such flow", async () => {
    const contextId = newContextId();
    const { scope, stub } = w.flowStub(contextId, 1);
    await runInDurableObject(stub, async (_instance, ds) => {
      const { host, told } = hostFor(ds.storage, scope, { store });
      const commits = new GroupCommit(host);
      expect(await commits.load()).toBeNull();
      await expect(commits.enqueue(start)).rejects.toBeInstanceOf(NotFoundError);
      expect(told.committed).toEqual([]);
    });
  });
});
