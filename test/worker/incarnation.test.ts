import { evictDurableObject, runInDurableObject } from "cloudflare:test";
import { afterAll, describe, expect, it } from "vitest";
import { REVOCATION_CHECK_MS } from "../../functions/core/key-cache.js";
import { feedName } from "../../functions/core/scopes.js";
import { storeForPrefix } from "../../functions/core/store.js";
import type { ContextFeed } from "../../functions/feed/context-feed.js";
import { NONCE_PREFIX } from "../../functions/flow/nonces.js";
import { PendingCommits } from "../../functions/flow/pending.js";
import { rebuildFlow } from "../../functions/flow/stored.js";
import { actorKeyId, generateKeyPair, type PrivateJwk } from "../../shared/auth/index.js";
import type { CoordinatorClient } from "../../shared/client/index.js";
import { apply } from "../../shared/flow/index.js";
import type { ContextStreamEvent, FlowStreamEvent } from "../../shared/model/index.js";
import { planCommit } from "../../shared/store/index.js";
import { eventually } from "../support/eventually.js";
import { deletePrefix, keysUnder } from "../support/prefix.js";
import { failure, ringAlarm, takeAlarm, testWorker, waitUntilPast } from "./harness.js";
import { jobName, PullRunner } from "./pull-runner.js";

// A flow's Durable Object keeps its storage (journal, pending plan, stream, nonces, feed cursor,
// alarm) when Redis loses the flow: flushed, replaced, or the flow deleted and its id given again.
// Here this file's whole keyspace is deleted ("flushed") while the objects keep their storage,
// the actor, context and runner come back with the same ids and keys, and new flows get the old
// ids: each must run clean, its stream from seq 1, nothing of the old flow leaking in.

const w = testWorker("incarnation");
afterAll(() => w.cleanup());

const ACTOR = 7;
const actorJwk: PrivateJwk = await generateKeyPair();

const sh = (name: string, depends: string[] = []) => ({
  name,
  script: `echo ${name}`,
  script_type: "sh" as const,
  depends,
});

/** Deletes every key of this file (its "Redis flushed"), then registers the actor and the context `ctx` again. */
async function flushed(ctx: number): Promise<CoordinatorClient> {
  await deletePrefix(w.redis, w.prefix);
  await w.anonymous.registerActor(actorJwk, { id: ACTOR });
  const client = await w.clientFor(actorJwk, actorKeyId(ACTOR));
  await client.createContext({ id: ctx });
  return client;
}

/** What a flow's object keeps: its storage keys, its alarm, and its event stream. */
function storageOf(stub: ReturnType<typeof w.flowStub>["stub"]) {
  return runInDurableObject(stub, async (_instance, state) => {
    const keys = [...(await state.storage.list()).keys()];
    const incarnation = await state.storage.get<string>("incarnation");
    const alarm = await state.storage.getAlarm();
    let stream: FlowStreamEvent[] = [];
    try {
      stream = state.storage.sql
        .exec<{ body: string }>("SELECT body FROM stream ORDER BY seq")
        .toArray()
        .map((row) => JSON.parse(row.body) as FlowStreamEvent);
    } catch {
      // No table: the stream was wiped with the rest.
    }
    return { keys, incarnation, alarm, stream };
  });
}

/** The flow hash's incarnation token, as Redis holds it. */
const tokenOf = (ctx: number, flowId: number) => w.redis.exec<string | null>(["HGET", w.keys.flow(ctx, flowId), "_op"]);

/** Flow, job and message records of this file in Redis. */
const recordsLeft = async () => (await keysUnder(w.redis, w.prefix)).filter((k) => /:(flow|job|message):/.test(k));

/** The context's feed, as its object keeps it. */
function feedOf(ctx: number): Promise<ContextStreamEvent[]> {
  const id = w.env.CONTEXT_FEED.idFromName(feedName({ prefix: w.prefix, contextId: ctx }));
  const stub = w.env.CONTEXT_FEED.get(id) as unknown as DurableObjectStub<ContextFeed>;
  return runInDurableObject(stub, (_instance, state) =>
    state.storage.sql
      .exec<{ body: string }>("SELECT body FROM feed ORDER BY seq")
      .toArray()
      .map((row) => JSON.parse(row.body) as ContextStreamEvent),
  );
}

/** A flow of three jobs in a chain, with `a` finished and `b` acknowledged and started: a journal, nonces, a stream. */
async function oldFlow(client: CoordinatorClient, runner: PullRunner, ctx: number) {
  const flow = await client.submitFlow(ctx, { start: true, jobs: [sh("a"), sh("b", ["a"]), sh("c", ["b"])] });
  const [a] = await runner.leaseSome();
  if (!a) throw new Error("nothing leased");
  await runner.finish(a, { v: "old" });
  const [b] = await runner.leaseSome();
  if (!b) throw new Error("nothing leased");
  await runner.report(b, "ack");
  await runner.report(b, "started");
  const { stub } = w.flowStub(ctx, flow.id);
  const kept = await storageOf(stub);
  expect(kept.keys).toContain(`journal:${b.message.job[0]?.id}`);
  expect(kept.keys.some((k) => k.startsWith(NONCE_PREFIX))).toBe(true);
  expect(kept.stream.length).toBeGreaterThan(8);
  expect(kept.incarnation).toBe(await tokenOf(ctx, flow.id));
  return { flow, stub, b };
}

/** Checks a new flow `x` under the old id ran clean: its own stream from 1, only its job, a new token. */
async function expectClean(ctx: number, flowId: number, stub: ReturnType<typeof w.flowStub>["stub"], old: string) {
  const now = await storageOf(stub);
  expect(now.incarnation).toBe(await tokenOf(ctx, flowId));
  expect(now.incarnation).not.toBe(old);
  expect(now.stream[0]).toMatchObject({ seq: 1, type: "flow.created", progress: { dispatched: 1 } });
  expect(now.stream.map((e) => e.seq)).toEqual(now.stream.map((_, i) => i + 1));
  // Nothing of the old jobs (a, b, c) or their runner's reports.
  expect(now.stream.filter((e) => e.job_id !== undefined && e.job_id !== 1)).toEqual([]);
  expect(now.keys.filter((k) => k.startsWith("journal:") && k !== "journal:1")).toEqual([]);
  return now;
}

describe("a flow's object and a flow under an id given again", () => {
  it("runs the new flow clean at an object that still holds the old one in memory", async () => {
    const ctx = 11;
    let client = await flushed(ctx);
    let runner = await PullRunner.register(w, client, ctx);
    const { flow: old, stub } = await oldFlow(client, runner, ctx);
    const oldToken = (await storageOf(stub)).incarnation as string;

    client = await flushed(ctx);
    runner = await PullRunner.again(w, client, runner);
    const flow = await client.submitFlow(ctx, { start: true, jobs: [sh("x")] });
    expect(flow.id).toBe(old.id);
    expect(flow.jobs.map((j) => [j.key, j.status, j.runner_id])).toEqual([["x", "dispatched", undefined]]);
    expect(flow.last_seq).toBeLessThan(5);
    // No nonce of the old runner's reports either.
    expect((await expectClean(ctx, flow.id, stub, oldToken)).keys.filter((k) => k.startsWith(NONCE_PREFIX))).toEqual(
      [],
    );

    const [x] = await runner.leaseSome();
    if (!x) throw new Error("nothing leased");
    expect(jobName(x)).toBe("x");
    expect(await runner.finish(x, { v: "new" })).toMatchObject({ outcome: "applied" });
    const done = await client.loadFlow(ctx, flow.id);
    expect(done).toMatchObject({ status: "finished", result: { x: { v: "new" } } });
    expect(done.jobs.map((j) => [j.key, j.attempt])).toEqual([["x", 1]]);
    await expectClean(ctx, flow.id, stub, oldToken);

    // The context's feed took the new flow's events although they are numbered from 1 again.
    const feed = await eventually(
      async () => {
        const events = (await feedOf(ctx)).flatMap((e) => ("flow_id" in e && e.flow_id === flow.id ? [e] : []));
        return events.some((e) => e.type === "flow.finished") ? events : undefined;
      },
      10_000,
      50,
      "the new flow's end in the context's feed",
    );
    expect(feed.map((e) => [e.type, e.flow_seq])).toEqual([
      ["flow.created", 1],
      ["flow.started", expect.any(Number)],
      ["flow.created", 1],
      ["flow.started", expect.any(Number)],
      ["flow.finished", expect.any(Number)],
    ]);
  });

  it("wipes the storage of a flow Redis lost when it next reads it, and runs the new one clean", async () => {
    const ctx = 12;
    let client = await flushed(ctx);
    let runner = await PullRunner.register(w, client, ctx);
    const { flow: old, stub } = await oldFlow(client, runner, ctx);
    const oldToken = (await storageOf(stub)).incarnation as string;

    client = await flushed(ctx);
    await evictDurableObject(stub);
    expect((await failure(client.loadFlow(ctx, old.id))).status).toBe(404);
    expect(await storageOf(stub)).toEqual({ keys: [], incarnation: undefined, alarm: null, stream: [] });

    runner = await PullRunner.again(w, client, runner);
    await evictDurableObject(stub);
    const flow = await client.submitFlow(ctx, { jobs: [sh("x")] });
    expect(flow).toMatchObject({ id: old.id, status: "dispatched" });
    await client.startFlow(ctx, flow.id);
    await expectClean(ctx, flow.id, stub, oldToken);
    const [x] = await runner.leaseSome();
    if (!x) throw new Error("nothing leased");
    await runner.finish(x, { v: "new" });
    expect(await client.loadFlow(ctx, flow.id)).toMatchObject({ status: "finished", result: { x: { v: "new" } } });
  });

  it("wipes it when an alarm wakes a fresh instance of a flow Redis lost, writing nothing to Redis", async () => {
    const ctx = 13;
    const client = await flushed(ctx);
    await PullRunner.register(w, client, ctx); // never leases: the delivery deadline sets the alarm
    const flow = await client.submitFlow(ctx, { start: true, jobs: [sh("late")] });
    const { stub } = w.flowStub(ctx, flow.id);
    expect((await storageOf(stub)).alarm).not.toBeNull();

    await deletePrefix(w.redis, w.prefix);
    await evictDurableObject(stub);
    await ringAlarm(stub);
    expect(await storageOf(stub)).toEqual({ keys: [], incarnation: undefined, alarm: null, stream: [] });
    expect(await recordsLeft()).toEqual([]);
  });

  it("acts on no deadline of a flow Redis lost while the object held it in memory", async () => {
    const ctx = 17;
    const client = await flushed(ctx);
    await PullRunner.register(w, client, ctx); // never leases: the delivery deadline sets the alarm
    const flow = await client.submitFlow(ctx, { start: true, timeouts: { timeout: 2 }, jobs: [sh("late")] });
    const { stub } = w.flowStub(ctx, flow.id);
    const alarm = await takeAlarm(stub);
    if (alarm === null) throw new Error("no alarm");

    await deletePrefix(w.redis, w.prefix);
    await waitUntilPast(alarm);
    await ringAlarm(stub);
    expect(await storageOf(stub)).toEqual({ keys: [], incarnation: undefined, alarm: null, stream: [] });
    // Acted on, the missed delivery would have written the job's and the flow's end as records of nothing.
    expect(await recordsLeft()).toEqual([]);
  });

  it("writes nothing when a runner reports on a flow Redis lost while the object held it in memory", async () => {
    const ctx = 18;
    let client = await flushed(ctx);
    let runner = await PullRunner.register(w, client, ctx);
    const { flow: old, stub, b } = await oldFlow(client, runner, ctx);
    const oldToken = (await storageOf(stub)).incarnation as string;

    // The runner comes back with its id and key, and reports on the attempt it held: its
    // signature is good, the flow in the object's memory is not in Redis any more.
    client = await flushed(ctx);
    runner = await PullRunner.again(w, client, runner);
    // Its commits check the record once a second at most: the last one saw it a moment ago.
    await new Promise((resolve) => setTimeout(resolve, REVOCATION_CHECK_MS));
    const answer = await runner.report(b, "result", { status: "finished", result: { v: "late" } });
    expect(answer).toMatchObject({ status: 404, code: "not-found" });
    // Written, the result would have left the job's end and the next job's attempt as partial
    // records, which the new flow under the id would then read as corrupt.
    expect(await recordsLeft()).toEqual([]);

    const flow = await client.submitFlow(ctx, { start: true, jobs: [sh("x")] });
    expect(flow.id).toBe(old.id);
    await expectClean(ctx, flow.id, stub, oldToken);
    const [x] = await runner.leaseSome();
    if (!x) throw new Error("nothing leased");
    expect(await runner.finish(x, { v: "new" })).toMatchObject({ outcome: "applied" });
    expect(await client.loadFlow(ctx, flow.id)).toMatchObject({ status: "finished", result: { x: { v: "new" } } });
  });

  it("does not show a flow Redis lost from memory once a second passed, nor answer 500 for a context gone", async () => {
    const ctx = 19;
    let client = await flushed(ctx);
    const { flow: old, stub } = await oldFlow(client, await PullRunner.register(w, client, ctx), ctx);
    client = await flushed(ctx);
    await new Promise((resolve) => setTimeout(resolve, REVOCATION_CHECK_MS));
    // The actor who holds the ids in the new database sees no trace of the old flow.
    expect((await failure(client.loadFlow(ctx, old.id))).status).toBe(404);
    expect((await storageOf(stub)).keys).toEqual([]);

    // A flow whose jobs wait, and its context gone from Redis while this isolate still trusts
    // its cached copy: the context's dispatcher, asked why the jobs wait, finds no context.
    const waiting = await client.submitFlow(ctx, { start: true, jobs: [sh("w", [])] });
    await w.redis.exec(["DEL", w.keys.context(ctx)]);
    const answer = await failure(client.loadFlow(ctx, waiting.id));
    expect([answer.status, answer.code]).toEqual([404, "not-found"]);
  });

  it("drops a commit left pending by the old flow instead of running it on keys Redis lost", async () => {
    const ctx = 14;
    const client = await flushed(ctx);
    await PullRunner.register(w, client, ctx);
    const flow = await client.submitFlow(ctx, { start: true, jobs: [sh("a"), sh("b")] });
    const { scope, stub } = w.flowStub(ctx, flow.id);
    // As a commit whose outcome was unknown leaves it: the plan of a cancel, pending.
    const store = storeForPrefix(w.env, w.prefix);
    const state = await rebuildFlow(store, scope, {});
    if (!state) throw new Error("no flow");
    const t = apply(state, { type: "cancel", reason: "old", at: Date.now() });
    expect(t.outcome).toBe("applied");
    const plan = planCommit(store.keys, [{ state: t.state, effects: t.effects }], Date.now());
    await runInDurableObject(stub, (_instance, s) => new PendingCommits(s.storage).write(plan));

    await deletePrefix(w.redis, w.prefix);
    await evictDurableObject(stub);
    await runInDurableObject(stub, (instance) => instance.tick(scope));
    expect((await storageOf(stub)).keys).toEqual([]);
    // Run, the plan would have written the flow's status and its jobs' ends into keys Redis lost.
    expect(await recordsLeft()).toEqual([]);
  });

  it("runs a job outside any flow clean under a job id given again", async () => {
    const ctx = 15;
    let client = await flushed(ctx);
    let runner = await PullRunner.register(w, client, ctx);
    const submit = async (c: CoordinatorClient, name: string) =>
      (
        (await c.request("POST", `/v1/contexts/${ctx}/jobs`, { job: sh(name), start: true })) as {
          job: { id: number; caller_id: number };
        }
      ).job;
    const old = await submit(client, "alone");
    const [d] = await runner.leaseSome();
    if (!d) throw new Error("nothing leased");
    await runner.report(d, "ack");
    await runner.report(d, "started");
    const { stub } = w.jobStub(ctx, old.caller_id, old.id);
    expect((await storageOf(stub)).keys).toContain(`journal:${old.id}`);

    client = await flushed(ctx);
    runner = await PullRunner.again(w, client, runner);
    const job = await submit(client, "again");
    expect(job.id).toBe(old.id);
    const [e] = await runner.leaseSome();
    if (!e) throw new Error("nothing leased");
    expect(jobName(e)).toBe("again");
    expect(e.attempt).toBe(1);
    await runner.finish(e, { v: "new" });
    const done = (await client.request("GET", `/v1/contexts/${ctx}/jobs/${job.caller_id}/${job.id}`)) as {
      status: string;
      result: Record<string, string>;
    };
    expect(done).toMatchObject({ status: "finished", result: { v: "new" } });
  });

  it("starts a schedule under an id given again from an empty memory", async () => {
    const ctx = 16;
    let client = await flushed(ctx);
    const template = { jobs: [{ name: "hello", script: "echo hello", script_type: "sh" as const }] };
    const old = await client.schedules.create(ctx, { template, interval_seconds: 3600, overlap: "allow_all" });
    const run = await client.schedules.trigger(ctx, old.id);
    expect((await client.schedules.get(ctx, old.id)).recent_runs).toHaveLength(1);

    client = await flushed(ctx);
    const schedule = await client.schedules.create(ctx, {
      template,
      interval_seconds: 3600,
      catchup: { policy: "run", max: 3 },
    });
    expect(schedule.id).toBe(old.id);
    const view = await client.schedules.get(ctx, schedule.id);
    // The old one's run (and its flow, whose id now names nothing of this schedule) are not this one's.
    expect(view.recent_runs).toEqual([]);
    expect(view.running_flow_ids).not.toContain(run.flow_id);
    expect(view.last_fire_at).toBeUndefined();
    await client.schedules.delete(ctx, schedule.id);
  });
});

describe("the context's feed", () => {
  it("takes a batch of another incarnation from nothing, and a repeat of it once", async () => {
    const id = w.env.CONTEXT_FEED.idFromName(feedName({ prefix: w.prefix, contextId: 99 }));
    const stub = w.env.CONTEXT_FEED.get(id) as unknown as DurableObjectStub<ContextFeed>;
    const scope = { prefix: w.prefix, contextId: 99, origin: "http://coordinator.test" };
    const event = (seq: number): FlowStreamEvent =>
      ({
        seq,
        type: seq === 1 ? "flow.created" : "flow.started",
        at_ms: Date.now(),
        context_id: 99,
        flow_id: 1,
        trace_id: "0af7651916cd43dd8448eb211c80319c",
        status: "dispatched",
        progress: {
          total: 1,
          dispatched: 1,
          waiting_for_prerequisites: 0,
          started: 0,
          finished: 0,
          error: 0,
          skipped: 0,
        },
      }) as FlowStreamEvent;
    const taken = await runInDurableObject(stub, async (instance, state) => {
      await instance.publish(scope, 1, [event(1), event(2)]); // no incarnation known yet
      await instance.publish(scope, 1, [event(2)]); // a repeat: already taken
      const before = state.storage.sql.exec("SELECT seq FROM feed").toArray().length;
      await instance.publish(scope, 1, [event(1), event(2)], "new"); // another incarnation
      await instance.publish(scope, 1, [event(2)], "new"); // a repeat of it
      const rows = state.storage.sql.exec<{ last: number; incarnation: string }>("SELECT * FROM flows").toArray();
      return { before, after: state.storage.sql.exec("SELECT seq FROM feed").toArray().length, rows };
    });
    expect(taken).toEqual({ before: 2, after: 4, rows: [{ flow: 1, last: 2, incarnation: "new" }] });
  });
});
