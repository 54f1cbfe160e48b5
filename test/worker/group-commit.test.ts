import { runInDurableObject } from "cloudflare:test";
import { afterAll, describe, expect, it } from "vitest";
import type { FlowScope } from "../../functions/core/scopes.js";
import { storeFor } from "../../functions/core/store.js";
import { GroupCommit, type CommitHost, type Committed } from "../../functions/flow/group-commit.js";
import { PendingCommits, type PendingCommit } from "../../functions/flow/pending.js";
import { FlowJournal } from "../../functions/flow/journal.js";
import { rebuildFlow } from "../../functions/flow/stored.js";
import { journalOf, type FlowEvent, type FlowState, type Transition } from "../../shared/flow/index.js";
import {
  NotFoundError,
  RedisCommandError,
  StorageUnavailableError,
  WAITING_NONE,
  type Store,
} from "../../shared/store/index.js";
import { assignmentsOf } from "../../functions/flow/own-claims.js";
import { flowOf, pushRunner, shJob, unreachableStore } from "./flow-fixtures.js";
import { testWorker } from "./harness.js";

// GroupCommit on its own: a real Durable Object's storage (for the pending plan and the journal),
// real Redis through the Store, and a host whose callbacks only record what they were told.

const w = testWorker("group-commit");
afterAll(() => w.cleanup());

/** The Store of this file's prefix. */
const store = storeFor(w.env);
/** A Store whose endpoint nothing listens at: every call fails, its outcome unknown to the caller. */
const away = unreachableStore(w.keys);

const CALLER = 9;
const RUNNER = 4;
const T = Date.now();

let nextContext = 1;

/** A new flow of independent jobs a, b, c (ids 1..3), created in Redis, and its object's stub. */
async function newFlow(): Promise<{ state: FlowState; scope: FlowScope; stub: ReturnType<typeof w.flowStub>["stub"] }> {
  const contextId = nextContext++;
  const state = flowOf(contextId, [shJob(1, "a"), shJob(2, "b"), shJob(3, "c")], { callerId: CALLER });
  expect(await store.flows.create(state, [], T)).toBe(true);
  return { state, ...w.flowStub(contextId, 1) };
}

/** What the host was told, in order. */
interface Told {
  committed: Committed[];
  resolved: PendingCommit[];
  down: number;
  up: number;
  /** Calls of host.store(): one to plan each batch that has steps, one per script call. */
  storeCalls: number;
  /** The stream events of durable batches, by type. */
  published: string[];
  /** States read back from storage (the stream catches up with each). */
  reloaded: number;
}

/**
 * A host over `storage` whose Store is `use.store` (a test swaps it to take storage away and
 * back); `onStore` runs at each call of store(), which tells the test where a batch is.
 */
function hostFor(
  storage: DurableObjectStorage,
  scope: FlowScope,
  use: { store: Store; onStore?: (call: number) => void },
): { host: CommitHost; told: Told } {
  const told: Told = { committed: [], resolved: [], down: 0, up: 0, storeCalls: 0, published: [], reloaded: 0 };
  const host: CommitHost = {
    storage,
    store: () => {
      told.storeCalls++;
      use.onStore?.(told.storeCalls);
      return use.store;
    },
    rebuild: (journal) => rebuildFlow(use.store, scope, journal),
    publish: (_state, changes) => told.published.push(...changes.map((c) => c.type)),
    reloaded: () => told.reloaded++,
    committed: async (batch) => {
      told.committed.push(batch);
    },
    resolved: async (plan) => {
      told.resolved.push(plan);
    },
    storageDown: async () => {
      told.down++;
    },
    storageUp: () => {
      told.up++;
    },
  };
  return { host, told };
}

const start: FlowEvent = { type: "start", at: T };
const assigned = (jobId: number): FlowEvent => ({
  type: "assigned",
  job: jobId,
  attempt: 1,
  runner: RUNNER,
  at: T + 10,
});
const finished = (jobId: number): FlowEvent => ({
  type: "finished",
  job: jobId,
  attempt: 1,
  runner: RUNNER,
  result: { done: String(jobId) },
  at: T + 20,
});

/** Work items of the flow waiting in its queue for sh runners. */
const queued = (state: FlowState) => w.redis.exec<number>(["LLEN", w.keys.queue(state.contextId, "sh", state.id)]);
const flowField = (state: FlowState, field: string) =>
  w.redis.exec<string | null>(["HGET", w.keys.flow(state.contextId, state.id), field]);
const jobField = (state: FlowState, jobId: number, field: string) =>
  w.redis.exec<string | null>(["HGET", w.keys.job(state.contextId, CALLER, jobId), field]);

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
      expect(now.jobs[3]?.status).toBe("dispatched");
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
      expect([1, 2, 3].map((id) => now.jobs[id]?.delivery?.state)).toEqual(["assigned", "assigned", undefined]);
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
      expect(loaded?.order.map((id) => [loaded.jobs[id]?.status, loaded.jobs[id]?.attempt])).toEqual([
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
      expect(loaded.jobs[1]?.deadline?.at).toBe(T + 300_000); // the start that won, not its own
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
        committed: async (batch) => {
          await host.committed(batch);
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

  it("fails the callers with not-found when there is no such flow", async () => {
    const contextId = nextContext++;
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
