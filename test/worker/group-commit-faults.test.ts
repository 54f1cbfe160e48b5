import { runInDurableObject } from "cloudflare:test";
import { describe, expect, it } from "vitest";
import { GroupCommit, type CommitHost } from "../../functions/flow/group-commit.js";
import { PendingCommits, type PendingCommit } from "../../functions/flow/pending.js";
import { FlowJournal } from "../../functions/flow/journal.js";
import type { FlowState, Transition } from "../../shared/flow/index.js";
import { RedisCommandError, StorageUnavailableError, type Store } from "../../shared/store/index.js";
import { assigned, CALLER, groupCommitFixture, start, T } from "./group-commit-fixtures.js";

// GroupCommit when storage fails or disagrees (group-commit-fixtures.ts): a commit whose outcome
// is unknown stays pending and runs again, harmlessly when Redis had applied it; a batch built on
// a memory behind Redis is a conflict; a plan Redis refused is dropped; a pending plan is settled
// only between commits.

const { w, store, away, newFlow, hostFor, queued, flowField } = groupCommitFixture("group-commit-faults");

describe("GroupCommit, when storage fails", () => {
  it("keeps a commit whose outcome is unknown pending, fails its callers, and runs it once storage is back", async () => {
    const { state, scope, stub } = await newFlow();
    await runInDurableObject(stub, async (_instance, ds) => {
      const use = { store: away };
      const { host, told } = hostFor(ds.storage, scope, use);
      const commits = new GroupCommit(host);
      const pending = new PendingCommits(ds.storage);
      commits.adopt(state);

      const answers = await Promise.allSettled([commits.enqueue(start), commits.enqueue(assigned(1))]);
      for (const answer of answers) {
        expect(answer.status).toBe("rejected");
        expect((answer as PromiseRejectedResult).reason).toBeInstanceOf(StorageUnavailableError);
      }
      expect(commits.current).toBeUndefined(); // memory forgotten
      expect(told).toMatchObject({ down: 1, up: 0, committed: [], resolved: [], published: [] });
      const plan = await pending.read();
      expect(plan).toMatchObject({
        queued: [{ flow: state.id, scriptType: "sh", priority: 0 }],
        freed: [],
        notifies: false,
      });
      expect(plan?.keys).toContain(w.keys.flow(state.contextId, state.id));
      expect(await new FlowJournal(ds.storage).read()).toEqual({});
      expect(await flowField(state, "status")).toBe("dispatched");

      // Still away: settling fails the same way and the plan stays.
      await expect(commits.settlePending()).rejects.toBeInstanceOf(StorageUnavailableError);
      expect(await pending.read()).toEqual(plan);

      // Storage is back: the plan runs before anything else, and what it owes is handed on.
      use.store = store;
      expect(await commits.settlePending()).toBe(true);
      expect(told.resolved).toEqual([plan]);
      expect(await pending.read()).toBeUndefined();
      expect(await flowField(state, "status")).toBe("started");
      expect(await queued(state)).toBe(3);
      expect(await commits.settlePending()).toBe(false); // nothing left

      // The state is read back from Redis (the stream catches up then); the callers' retries find
      // the start done, the assignment not.
      const loaded = await commits.load();
      expect(told.reloaded).toBe(1);
      expect(loaded?.status).toBe("started");
      expect(loaded?.order.map((id) => [loaded.jobs.get(id)?.status, loaded.jobs.get(id)?.attempt])).toEqual([
        ["dispatched", 1],
        ["dispatched", 1],
        ["dispatched", 1],
      ]);
      expect((await commits.enqueue(start)).outcome).toBe("duplicate");
      expect((await commits.enqueue(assigned(1))).outcome).toBe("applied");
      expect(told.published).toEqual(["job.dispatched"]);
      expect(await queued(state)).toBe(3);
      expect(told.down).toBe(1);
      expect(told.up).toBeGreaterThan(0);
    });
  });

  it("runs a pending plan that Redis applied after all again harmlessly, when it loads", async () => {
    const { state, scope, stub } = await newFlow();
    await runInDurableObject(stub, async (_instance, ds) => {
      const use = { store: away };
      const { host, told } = hostFor(ds.storage, scope, use);
      const commits = new GroupCommit(host);
      commits.adopt(state);
      await expect(commits.enqueue(start)).rejects.toBeInstanceOf(StorageUnavailableError);
      const plan = (await new PendingCommits(ds.storage).read()) as PendingCommit;

      // The call whose answer was lost did reach Redis (here: it is run once by hand).
      expect((await store.flows.commit(plan)).skipped).toEqual([]);
      const startedAt = await flowField(state, "started_at");
      const message = await w.redis.exec<string[]>(["HGETALL", w.keys.message(state.contextId, CALLER, 100)]);

      use.store = store;
      const loaded = await commits.load(); // settles the plan first: every guarded section is skipped
      expect(loaded?.status).toBe("started");
      expect(told.resolved).toEqual([plan]);
      expect(await new PendingCommits(ds.storage).read()).toBeUndefined();
      expect(await queued(state)).toBe(3); // not 6
      expect(await flowField(state, "started_at")).toBe(startedAt);
      expect(await w.redis.exec<string[]>(["HGETALL", w.keys.message(state.contextId, CALLER, 100)])).toEqual(message);
      // Run once more, Redis says so: the plan's one section (the start) is skipped.
      expect((await store.flows.commit(plan)).skipped).toEqual([1]);
    });
  });

  it("reports a batch built on a memory behind Redis as a conflict, writes nothing twice and reads the state back", async () => {
    const { state, scope, stub } = await newFlow();
    await runInDurableObject(stub, async (_instance, ds) => {
      const first = hostFor(ds.storage, scope, { store });
      const ahead = new GroupCommit(first.host);
      ahead.adopt(state);
      await ahead.enqueue(start);
      const journal = await new FlowJournal(ds.storage).read();

      // A second writer whose memory still holds the flow before the start (as after a lost answer).
      const second = hostFor(ds.storage, scope, { store });
      const behind = new GroupCommit(second.host);
      behind.adopt(state);
      const t: Transition = await behind.enqueue({ ...start, at: T + 5_000 });
      expect(t.outcome).toBe("applied"); // as memory saw it
      expect(second.told.committed).toHaveLength(1);
      expect(second.told.committed[0]?.conflict).toBe(true);
      expect(behind.current).toBeUndefined(); // Redis has the truth: read it back
      expect(await new FlowJournal(ds.storage).read()).toEqual(journal); // its own view is not journalled
      expect(await new PendingCommits(ds.storage).read()).toBeUndefined();
      expect(await queued(state)).toBe(3);

      const loaded = (await behind.load()) as FlowState;
      expect(loaded.jobs.get(1)?.deadline?.at).toBe(T + 300_000); // the start that won, not its own
      expect(loaded.jobs).toEqual(ahead.current?.jobs);
      expect(loaded.status).toBe("started");
    });
  });

  it("drops a plan Redis refused (a bug, not an outage) without calling storage down", async () => {
    const { state, scope, stub } = await newFlow();
    const queue = w.keys.queue(state.contextId, "sh", state.id);
    await w.redis.exec(["SET", queue, "not a list"]); // the start's RPUSH there fails: WRONGTYPE
    try {
      await runInDurableObject(stub, async (_instance, ds) => {
        const { host, told } = hostFor(ds.storage, scope, { store });
        const commits = new GroupCommit(host);
        commits.adopt(state);
        await expect(commits.enqueue(start)).rejects.toBeInstanceOf(RedisCommandError);
        expect(commits.current).toBeUndefined();
        expect(told).toMatchObject({ down: 0, committed: [], resolved: [] });
        expect(await new PendingCommits(ds.storage).read()).toBeUndefined(); // running it again cannot help
      });
    } finally {
      await w.redis.exec(["DEL", queue]);
    }
  });

  it("settles a pending plan only between commits, so it never clears a newer plan whose outcome is unknown", async () => {
    const { state, scope, stub } = await newFlow();
    await runInDurableObject(stub, async (_instance, ds) => {
      const use: { store: Store } = { store };
      const { host, told } = hostFor(ds.storage, scope, use);
      // Batch 1 carries out its effects (waking the dispatcher, in the coordinator) while its plan
      // is still pending; a tick or an alarm settles pending plans meanwhile.
      let release = () => {};
      const gate = new Promise<void>((resolve) => (release = resolve));
      let inEffects = () => {};
      const reached = new Promise<void>((resolve) => (inEffects = resolve));
      const gated: CommitHost = {
        ...host,
        afterCommit: async (batch) => {
          await host.afterCommit(batch);
          if (told.committed.length === 1) {
            inEffects();
            await gate;
          }
        },
      };
      const commits = new GroupCommit(gated);
      commits.adopt(state);
      const started = commits.enqueue(start);
      await reached;
      expect(await new PendingCommits(ds.storage).read()).toBeDefined();
      const settled = commits.settlePending();
      release();
      await started;
      // Batch 2 goes out while storage is away: its outcome is unknown, its plan must stay.
      use.store = away;
      await expect(commits.enqueue({ type: "cancel", reason: "test", at: T + 30 })).rejects.toBeInstanceOf(
        StorageUnavailableError,
      );
      expect(await settled).toBe(false); // its turn came after batch 1, whose plan was then done
      expect(told.resolved).toEqual([]);
      const left = await new PendingCommits(ds.storage).read();
      expect(JSON.stringify(left?.args)).toContain("cancel");
      use.store = store;
      expect(await commits.settlePending()).toBe(true);
      expect(told.resolved).toHaveLength(1);
      expect(await flowField(state, "status")).toBe("error");
      expect(await new PendingCommits(ds.storage).read()).toBeUndefined();
    });
  });
});
