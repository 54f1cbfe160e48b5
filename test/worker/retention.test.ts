import { evictDurableObject, runInDurableObject } from "cloudflare:test";
import { afterAll, beforeAll, beforeEach, describe, expect, it } from "vitest";
import type { CoordinatorClient } from "../../shared/client/index.js";
import type { FlowSubmissionInput } from "../../shared/flow/index.js";
import type { Message } from "../../shared/model/index.js";
import { keysUnder } from "../support/prefix.js";
import type { ContextFeed } from "../../functions/feed/context-feed.js";
import { feedStub } from "../../functions/core/stubs.js";
import { BASE, failure, testWorker } from "./harness.js";
import { PullRunner } from "./pull-runner.js";

// Retention, deleting a flow, deleting a context: what goes, what stays, inside workerd.

const w = testWorker("retention");
afterAll(() => w.cleanup());

let client: CoordinatorClient;
let callerId: number;
let ctx: number;
let runner: PullRunner;

beforeAll(async () => {
  const actor = await w.newActor();
  client = actor.client;
  callerId = actor.actor.id;
});
beforeEach(async () => {
  ctx = (await client.createContext()).id;
  runner = await PullRunner.register(w, client, ctx);
});

const sh = (name: string, depends: string[] = [], retries = 0) => ({
  name,
  script: `echo ${name}`,
  script_type: "sh" as const,
  depends,
  retries,
});
const submit = (body: FlowSubmissionInput) => client.submitFlow(ctx, body);
const fast = { retry_base_ms: 10, retry_cap_ms: 20 };
const pause = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** Every key of the context's namespace, sorted. */
const contextKeys = async (contextId = ctx) => (await keysUnder(w.redis, w.keys.namespace(contextId))).sort();

/** What a flow's object keeps in its storage: KV keys and rows of its event stream. */
function storedIn(flowId: number): Promise<{ keys: string[]; events: number }> {
  return runInDurableObject(w.flowStub(ctx, flowId).stub, async (_instance, state) => {
    const keys = [...(await state.storage.list()).keys()];
    const tables = state.storage.sql
      .exec<{ name: string }>("SELECT name FROM sqlite_master WHERE type = 'table' AND name = 'stream'")
      .toArray();
    const events =
      tables.length > 0 ? state.storage.sql.exec<{ n: number }>("SELECT COUNT(*) AS n FROM stream").one().n : 0;
    return { keys, events };
  });
}

/** The flows the context's feed keeps a cursor for. */
function feedCursors(): Promise<number[]> {
  const stub = feedStub(w.env, { prefix: w.prefix, contextId: ctx, origin: BASE });
  return runInDurableObject(stub as unknown as DurableObjectStub<ContextFeed>, (_instance, state) =>
    state.storage.sql
      .exec<{ flow: number }>("SELECT flow FROM flows ORDER BY flow")
      .toArray()
      .map((r) => r.flow),
  );
}

/**
 * Makes the context due for the sweep now, as it is at its next due time anyway: it is due at its
 * running flows' deadlines, and a flow's end does not spend a command to move that earlier.
 */
const dueNow = () => w.redis.exec(["ZADD", w.keys.sweepDue(), "0", String(ctx)]);

/** Runs every job the runner gets to its end: `fail` names jobs that fail. */
async function runAll(count: number, fail: string[] = []): Promise<void> {
  for (const d of await runner.leaseSome(count)) {
    const name = d.message.job[0]?.name ?? "";
    if (fail.includes(name)) await runner.fail(d, `${name} failed`);
    else await runner.finish(d, { [name]: "done" });
  }
}

/** The keys of a flow's records: its hash, its jobs' and the messages of its attempts and result. */
function flowKeys(keys: string[], flowId: number): string[] {
  return keys.filter((k) => k.endsWith(`:flow:${flowId}`));
}

describe("retention", () => {
  it("removes ended flows with all they own once their window passed, and nothing of a running flow", async () => {
    await client.lifecycle.setRetention(ctx, { finished_seconds: 1, error_seconds: 1 });
    const done = await submit({ start: true, jobs: [sh("a"), sh("b", ["a"])] });
    const failed = await submit({ start: true, timeouts: fast, jobs: [sh("bad")] });
    await runAll(2, ["bad"]);
    await runAll(1);
    const running = await submit({ start: true, jobs: [sh("slow"), sh("later", ["slow"])] });
    const [slow] = await runner.leaseSome(1);
    if (!slow) throw new Error("nothing leased");
    await runner.report(slow, "ack");
    await runner.report(slow, "started");
    expect((await client.loadFlow(ctx, done.id)).status).toBe("finished");
    expect((await client.loadFlow(ctx, failed.id)).status).toBe("error");
    expect((await storedIn(done.id)).events).toBeGreaterThan(0);
    const before = await client.loadContext(ctx);
    expect(before.stored.ended).toEqual({ finished: 1, error: 1 });
    expect(before.retention_in_force).toMatchObject({
      finished_seconds: 1,
      error_seconds: 1,
      overridden: ["finished_seconds", "error_seconds"],
    });

    await pause(1_100);
    await w.sweep();
    await w.sweep(); // a repeat finds nothing more to do

    for (const flowId of [done.id, failed.id]) {
      expect((await failure(client.loadFlow(ctx, flowId))).status).toBe(404);
      expect(await storedIn(flowId)).toEqual({ keys: [], events: 0 });
    }
    // The context's feed forgot their cursors; the running flow's is kept.
    expect(await feedCursors()).toEqual([running.id]);
    const left = await contextKeys();
    expect(flowKeys(left, done.id)).toEqual([]);
    expect(flowKeys(left, failed.id)).toEqual([]);
    // Jobs a..bad and their attempts' messages are gone; the running flow's are all there.
    const view = await client.loadFlow(ctx, running.id);
    expect(view.status).toBe("started");
    const after = await client.loadContext(ctx);
    expect(after.stored).toMatchObject({
      flows: { started: 1, finished: 0, error: 0 },
      ended: { finished: 0, error: 0 },
    });
    expect(after.stored.jobs).toBe(2);
    // The dead letter of the failed job stays: dead letters are kept (and capped) on their own.
    expect(after.stored.dead_letters).toBe(1);

    await runner.report(slow, "result", { status: "finished", result: {} });
    await runAll(1);
    expect((await client.loadFlow(ctx, running.id)).status).toBe("finished");
    await pause(1_100);
    await dueNow();
    await w.sweep();
    expect((await failure(client.loadFlow(ctx, running.id))).status).toBe(404);
    expect((await client.loadContext(ctx)).stored).toMatchObject({ jobs: 0, ended: { finished: 0, error: 0 } });
  });

  it("keeps a failed flow that was re-run, and removes the messages of every run once it ends", async () => {
    await client.lifecycle.setRetention(ctx, { finished_seconds: 1, error_seconds: 1 });
    const flow = await submit({ start: true, timeouts: fast, jobs: [sh("flaky")] });
    const [first] = await runner.leaseSome(1);
    if (!first) throw new Error("nothing leased");
    await runner.fail(first, "flaky failed");
    expect((await client.loadFlow(ctx, flow.id)).status).toBe("error");
    await pause(1_100);
    await client.rerunFlow(ctx, flow.id); // before the sweep: it runs again, and must stay
    await w.sweep();
    const [again] = await runner.leaseSome(1);
    if (!again) throw new Error("the re-run was not dispatched");
    expect(again.attempt).toBe(2);
    const oldAttempt = w.keys.message(ctx, callerId, first.message.id);
    expect(await w.redis.exec(["EXISTS", oldAttempt])).toBe(1);
    await runner.finish(again);
    expect((await client.loadFlow(ctx, flow.id)).status).toBe("finished");
    await pause(1_100);
    await dueNow();
    await w.sweep();
    expect((await failure(client.loadFlow(ctx, flow.id))).status).toBe(404);
    // Both runs' attempts go with it (the first run's through the job's past_messages). The first
    // run's result mail is the caller's: it goes as its inbox's mail does (read, or its window).
    expect(await w.redis.exec(["EXISTS", oldAttempt, w.keys.message(ctx, callerId, again.message.id)])).toBe(0);
  });

  it("removes a job outside any flow after its object was evicted, and a flow cancelled before it started", async () => {
    await client.lifecycle.setRetention(ctx, { finished_seconds: 1, error_seconds: 1 });
    const answer = (await client.request("POST", `/v1/contexts/${ctx}/jobs`, {
      job: { name: "lone", script: "echo lone", script_type: "sh" },
      start: true,
    })) as { job: { id: number; caller_id: number } };
    await runAll(1);
    const lone = w.jobStub(ctx, answer.job.caller_id, answer.job.id).stub;
    await evictDurableObject(lone); // its memory gone: the end is read back from the job's record
    const idle = await submit({ jobs: [sh("never")] });
    await client.cancelFlow(ctx, idle.id, "not needed");
    expect((await client.loadContext(ctx)).stored.ended).toEqual({ finished: 1, error: 1 });
    await pause(1_100);
    await dueNow();
    await w.sweep();
    expect(await w.redis.exec(["EXISTS", w.keys.job(ctx, answer.job.caller_id, answer.job.id)])).toBe(0);
    const after = await client.loadContext(ctx);
    expect(after.stored).toMatchObject({ jobs: 0, ended: { finished: 0, error: 0 } });
    expect(after.stored.flows).toEqual({
      dispatched: 0,
      started: 0,
      finished: 0,
      error: 0,
      compensating: 0,
      compensated: 0,
      compensation_failed: 0,
    });
  });

  it("keeps a failed flow while another of its jobs still runs, and removes it once that ended", async () => {
    await client.lifecycle.setRetention(ctx, { error_seconds: 1 });
    const flow = await submit({ start: true, jobs: [sh("bad"), sh("slow")] });
    const leased = await runner.leaseSome(2);
    const bad = leased.find((d) => d.message.job[0]?.name === "bad");
    const slow = leased.find((d) => d.message.job[0]?.name === "slow");
    if (!bad || !slow) throw new Error("both jobs should be leased");
    await runner.report(slow, "ack");
    await runner.fail(bad, "boom");
    expect((await client.loadFlow(ctx, flow.id)).status).toBe("error");
    const refused = await failure(client.lifecycle.deleteFlow(ctx, flow.id));
    expect([refused.status, refused.message]).toEqual([409, expect.stringContaining("still run") as string]);
    await pause(1_100);
    await dueNow();
    await w.sweep();
    expect((await client.loadFlow(ctx, flow.id)).jobs.map((j) => j.status)).toEqual(["error", "dispatched"]);
    // Its entry waits a window again rather than standing in front of the others.
    expect(Number(await w.redis.exec(["ZSCORE", w.keys.ended(ctx, "error"), `flow:${flow.id}`]))).toBeGreaterThan(
      Date.now() - 5_000,
    );
    await runner.report(slow, "result", { status: "finished", result: {} });
    await pause(1_100);
    await dueNow();
    await w.sweep();
    expect((await failure(client.loadFlow(ctx, flow.id))).status).toBe(404);
  });

  it("removes a message as it is read, and an unread one after the inbox window", async () => {
    const flow = await submit({ start: true, jobs: [sh("one")] });
    await runAll(1);
    expect((await client.loadFlow(ctx, flow.id)).status).toBe("finished");
    const inbox = (pop: boolean) =>
      client.request("GET", `/v1/contexts/${ctx}/inbox?pop=${pop}`) as Promise<{ messages: Message[] }>;
    const peeked = (await inbox(false)).messages;
    expect(peeked).toHaveLength(1);
    const key = w.keys.message(ctx, callerId, (peeked[0] as Message).id);
    const read = (await inbox(true)).messages;
    expect(read[0]).toMatchObject({ id: peeked[0]?.id, status: "processed" });
    expect(await w.redis.exec(["EXISTS", key])).toBe(0);
    expect((await inbox(true)).messages).toEqual([]);

    const unread = await submit({ start: true, jobs: [sh("two")] });
    await runAll(1);
    expect((await client.loadFlow(ctx, unread.id)).status).toBe("finished");
    expect((await client.loadContext(ctx)).stored.unread_inbox).toBe(1);
    await client.lifecycle.setRetention(ctx, { inbox_seconds: 1 });
    await pause(1_100);
    await w.sweep();
    expect((await inbox(false)).messages).toEqual([]);
    expect((await client.loadContext(ctx)).stored.unread_inbox).toBe(0);
    // The flow itself is kept: its own window (the default, days) has not passed.
    expect((await client.loadFlow(ctx, unread.id)).status).toBe("finished");
  });

  it("shows the deployment's defaults until a context sets its own, and null goes back to them", async () => {
    const shown = (await client.loadContext(ctx)).retention_in_force;
    expect(shown).toEqual({
      finished_seconds: 604_800,
      error_seconds: 2_592_000,
      inbox_seconds: 2_592_000,
      dead_letters: expect.any(Number) as number,
      overridden: [],
    });
    const set = await client.lifecycle.setRetention(ctx, { finished_seconds: 60, dead_letters: 5 });
    expect(set.retention).toEqual({ finished_seconds: 60, dead_letters: 5 });
    expect(set.retention_in_force.overridden).toEqual(["finished_seconds", "dead_letters"]);
    const back = await client.lifecycle.setRetention(ctx, { finished_seconds: null });
    expect(back.retention).toEqual({ dead_letters: 5 });
    const bad = await failure(client.lifecycle.setRetention(ctx, { finished_seconds: 0 }));
    expect(bad.status).toBe(400);
    expect(JSON.stringify(bad.problem)).toContain("finished_seconds");
  });
});

describe("deleting a flow", () => {
  it("refuses a running flow (409 naming its status), deletes an ended one with all it owns, then 404", async () => {
    const flow = await submit({ start: true, jobs: [sh("x")] });
    const refused = await failure(client.lifecycle.deleteFlow(ctx, flow.id));
    expect(refused.status).toBe(409);
    expect(refused.problem).toMatchObject({ status: 409 });
    expect(refused.message).toContain("started");
    await runAll(1);
    expect((await client.loadFlow(ctx, flow.id)).status).toBe("finished");
    await client.lifecycle.deleteFlow(ctx, flow.id);
    expect((await failure(client.loadFlow(ctx, flow.id))).status).toBe(404);
    expect(flowKeys(await contextKeys(), flow.id)).toEqual([]);
    expect(await storedIn(flow.id)).toEqual({ keys: [], events: 0 });
    expect((await client.loadContext(ctx)).stored).toMatchObject({ jobs: 0, unread_inbox: 0 });
    expect((await failure(client.lifecycle.deleteFlow(ctx, flow.id))).status).toBe(404);
  });
});

describe("deleting a context", () => {
  it("removes everything of it, Durable Object storage included, and it is gone at once", async () => {
    const ended = await submit({ start: true, jobs: [sh("e")] });
    await runAll(1);
    const running = await submit({ start: true, jobs: [sh("r")] });
    await runner.leaseSome(1);
    await client.schedules.create(ctx, { template: { jobs: [sh("s")] }, interval_seconds: 3600 });
    expect((await contextKeys()).length).toBeGreaterThan(5);

    expect(await client.deleteContext(ctx)).toBe(true);
    expect((await failure(client.loadContext(ctx))).status).toBe(404);
    expect(await contextKeys()).toEqual([]);
    for (const flowId of [ended.id, running.id]) expect(await storedIn(flowId)).toEqual({ keys: [], events: 0 });
    // The runner's key no longer works (401 once its isolate drops the cached key; 404 before).
    expect([401, 404]).toContain((await failure(runner.lease())).status);
    // Its place in the indexes is gone, and asking again is 404.
    expect(await w.redis.exec(["ZSCORE", w.keys.contextIndex(), String(ctx)])).toBeNull();
    expect(await w.redis.exec(["ZSCORE", w.keys.contextsDeleting(), String(ctx)])).toBeNull();
    expect((await failure(client.deleteContext(ctx))).status).toBe(404);
  });

  it("goes on from where it was after an interruption: the sweep finishes a deletion begun", async () => {
    const flow = await submit({ start: true, jobs: [sh("e")] });
    await runAll(1);
    // As if the request died right after marking the context: only the mark was made.
    await w.redis.exec(["ZADD", w.keys.contextsDeleting(), String(Date.now()), String(ctx)]);
    await w.redis.exec(["ZADD", w.keys.sweepDue(), "0", String(ctx)]);
    await w.redis.exec(["HSET", w.keys.context(ctx), "deleting_since", String(Math.floor(Date.now() / 1000))]);
    await w.sweep();
    expect(await contextKeys()).toEqual([]);
    expect(await storedIn(flow.id)).toEqual({ keys: [], events: 0 });
    expect(await w.redis.exec(["ZSCORE", w.keys.contextsDeleting(), String(ctx)])).toBeNull();
  });
});
