import { runDurableObjectAlarm } from "cloudflare:test";
import { afterAll, beforeAll, beforeEach, describe, expect, it } from "vitest";
import { ApiError, type CoordinatorClient } from "../../shared/client/index.js";
import type { FlowSubmissionInput } from "../../shared/flow/index.js";
import type { FlowView, Message, RunnerJob } from "../../shared/model/index.js";
import { eventually } from "../support/eventually.js";
import { failure, ringAlarm, takeAlarm, testWorker, waitUntilPast } from "./harness.js";
import { jobName, PullRunner } from "./pull-runner.js";

// Retries, leases, dead letters, re-runs, cancel and pause, inside workerd.

const w = testWorker("recovery");
afterAll(() => w.cleanup());

let client: CoordinatorClient;
let ctx: number;
let runner: PullRunner;

beforeAll(async () => {
  client = (await w.newActor()).client;
});
beforeEach(async () => {
  ctx = (await client.createContext()).id;
  runner = await PullRunner.register(w, client, ctx);
});

const sh = (name: string, depends: string[] = [], extra: { retries?: number; timeout?: number } = {}) => ({
  name,
  script: `echo ${name}`,
  script_type: "sh" as const,
  depends,
  ...extra,
});
const submit = (body: FlowSubmissionInput) => client.submitFlow(ctx, body);
const fast = { retry_base_ms: 10, retry_cap_ms: 20 };

const stubOf = (flowId: number) => w.flowStub(ctx, flowId).stub;

/**
 * What a flow has written: its record and its jobs' (as stored), the context's figure records
 * waiting to be folded, the caller's inbox, and the number of the flow's latest event.
 */
async function footprint(flowId: number) {
  const view = await client.loadFlow(ctx, flowId);
  const hash = (key: string) => w.redis.exec<string[]>(["HGETALL", key]);
  return {
    status: view.status,
    lastSeq: view.last_seq,
    flow: await hash(w.keys.flow(ctx, flowId)),
    jobs: await Promise.all(view.jobs.map((j) => hash(w.keys.job(ctx, view.caller_id, j.id)))),
    figures: await w.redis.exec<number>(["LLEN", w.keys.contextFigures(ctx)]),
    inbox: await w.redis.exec<number>(["LLEN", w.keys.msgIn(ctx, view.caller_id)]),
  };
}

/** Rings the flow's alarm, if one is set, until the condition holds (the alarm holds the nearest deadline). */
function ringUntil(flowId: number, done: (view: FlowView) => boolean): Promise<FlowView> {
  return eventually(
    async () => {
      const view = await client.loadFlow(ctx, flowId);
      if (done(view)) return view;
      await runDurableObjectAlarm(stubOf(flowId));
      return undefined;
    },
    10_000,
    30,
    `flow ${flowId} getting there`,
  );
}

describe("retries", () => {
  it("retries a failed attempt after a backoff, on another runner if it can, and ignores the stale attempt", async () => {
    const other = await PullRunner.register(w, client, ctx);
    const flow = await submit({ start: true, timeouts: fast, jobs: [sh("flaky", [], { retries: 2 })] });
    const [first] = await runner.leaseSome();
    if (!first) throw new Error("nothing leased");
    await runner.fail(first, "exit code 1");
    // The backoff (at most 20 ms here; its bounds are unit-tested on the machine) is waited out by
    // a real alarm, which may already have rung: the job is on attempt 1 or 2, never lost or ended.
    const waiting = await client.loadFlow(ctx, flow.id);
    expect(waiting.jobs[0]).toMatchObject({ status: "dispatched", error: "exit code 1" });
    expect([1, 2]).toContain(waiting.jobs[0]?.attempt);
    await ringUntil(flow.id, (v) => (v.jobs[0]?.attempt ?? 0) === 2);
    const [second] = await other.leaseSome();
    if (!second) throw new Error("the retry was not dispatched");
    expect(second.attempt).toBe(2);
    expect(second.message.avoid_runner_id).toBe(runner.id);
    expect(second.message.job[0]?.env_vars.JOB_ATTEMPT).toBe("2");
    expect(await runner.report(first, "result", { status: "finished", result: {} })).toMatchObject({
      status: 409,
      code: "stale-attempt",
    });
    await other.finish(second, { ok: "yes" });
    const view = await client.loadFlow(ctx, flow.id);
    expect(view.status).toBe("finished");
    const failedMessage = (await client.request(
      "GET",
      `/v1/contexts/${ctx}/messages/${second.message.caller_id}/${first.message.id}`,
    )) as { status: string };
    expect(failedMessage.status).toBe("error");
  });

  it("renews a running job's lease with each heartbeat, and fails it when it goes silent", async () => {
    const flow = await submit({
      start: true,
      timeouts: { ...fast, timeout_result: 2 },
      jobs: [sh("long", [], { timeout: 30 })],
    });
    const [d] = await runner.leaseSome();
    if (!d) throw new Error("nothing leased");
    await runner.report(d, "ack");
    await runner.report(d, "started");
    // The lease ends timeout_result (2 s) after the last sign of life, and the flow's alarm is set
    // for it. The test takes the alarm away each time it is set, so it never rings by itself: the
    // test rings it.
    const stub = stubOf(flow.id);
    const first = await takeAlarm(stub);
    if (first === null) throw new Error("no alarm for the lease");
    // Heartbeats until past the first lease's end: each moves the lease on, and the alarm rung
    // after it finds nothing due.
    let lease = first;
    while (Date.now() <= first + 300) {
      await new Promise((r) => setTimeout(r, 300));
      expect(await runner.report(d, "heartbeat")).not.toBeInstanceOf(ApiError);
      await ringAlarm(stub);
      const renewed = await takeAlarm(stub);
      expect(renewed).toBeGreaterThan(lease);
      lease = renewed as number;
      expect((await client.loadFlow(ctx, flow.id)).jobs[0]?.status).toBe("started");
    }
    // Silent since: once the last lease ran out, the alarm fails the attempt.
    await waitUntilPast(lease);
    expect((await client.loadFlow(ctx, flow.id)).jobs[0]?.status).toBe("started");
    await ringAlarm(stub);
    const view = await client.loadFlow(ctx, flow.id);
    expect(view.status).toBe("error");
    expect(view.error?.reason).toMatch(/^attempt 1 went silent: no result, heartbeat or log for 2 s$/);
  });
});

describe("dead letters and re-runs", () => {
  it("keeps a job out of retries as a dead letter, and re-runs the flow from its failed jobs only", async () => {
    const flow = await submit({ start: true, timeouts: fast, jobs: [sh("a"), sh("b", ["a"]), sh("c", ["b"])] });
    const [a] = await runner.leaseSome();
    if (!a) throw new Error("nothing leased");
    await runner.finish(a, { v: "a" });
    const [b] = await runner.leaseSome();
    if (!b) throw new Error("nothing leased");
    await runner.fail(b, "exit code 7");
    expect((await client.loadFlow(ctx, flow.id)).status).toBe("error");

    const letters = await client.listDeadLetters(ctx);
    const letter = letters.items.find((l) => l.job_key === "b");
    expect(letter).toMatchObject({ kind: "job", flow_id: flow.id, attempts: 1, reason: "exit code 7" });
    expect(await client.loadDeadLetter(ctx, letter?.id ?? "")).toEqual(letter);

    // b's message took its end from b's record (the commit wrote only the job).
    const bId = flow.jobs.find((j) => j.key === "b")?.id as number;
    const bRecord = (await client.request("GET", `/v1/contexts/${ctx}/jobs/${flow.caller_id}/${bId}`)) as RunnerJob;
    const firstRun = bRecord.message_base as number;
    const readMessage = (id: number) =>
      client.request("GET", `/v1/contexts/${ctx}/messages/${flow.caller_id}/${id}`) as Promise<Message>;
    const storedEnd = (id: number) =>
      w.redis.exec<string | null>(["HGET", w.keys.message(ctx, flow.caller_id, id), "ended_at"]);
    expect(bRecord).toMatchObject({ status: "error", attempt: 1, last_runner_id: runner.id });
    const ended = { status: "error", attempt: 1, runner_id: runner.id, ended_at: bRecord.ended_at };
    expect(await readMessage(firstRun)).toMatchObject(ended);
    expect(await storedEnd(firstRun)).toBeNull();

    const again = await client.rerunFlow(ctx, flow.id);
    expect(again.status).toBe("started");
    // The re-run wrote that end into the message before b's record forgot it.
    expect(await readMessage(firstRun)).toMatchObject(ended);
    expect(await storedEnd(firstRun)).toBe(String(bRecord.ended_at));
    expect(
      await client.request("GET", `/v1/contexts/${ctx}/jobs/${flow.caller_id}/${bId}`).then((r) => r as RunnerJob),
    ).not.toHaveProperty("ended_at");
    expect(again.jobs.map((j) => [j.key, j.status])).toEqual([
      ["a", "finished"],
      ["b", "dispatched"],
      ["c", "waiting_for_prerequisites"],
    ]);
    const ran: string[] = [];
    for (let round = 0; round < 20 && ran.length < 2; round++) {
      for (const d of await runner.leaseSome()) {
        ran.push(`${jobName(d)}@${d.attempt}`);
        await runner.finish(d, { v: jobName(d) });
      }
    }
    expect(ran).toEqual(["b@2", "c@1"]);
    const rerunRecord = (await client.request("GET", `/v1/contexts/${ctx}/jobs/${flow.caller_id}/${bId}`)) as RunnerJob;
    const secondRun = (rerunRecord.message_base as number) + 1; // attempt 2, the re-run's first
    expect(await readMessage(secondRun)).toMatchObject({ status: "processed", attempt: 2, runner_id: runner.id });
    expect(await readMessage(firstRun)).toMatchObject(ended);
    const view = await client.loadFlow(ctx, flow.id);
    expect(view.status).toBe("finished");
    expect(view.result).toEqual({ a: { v: "a" }, b: { v: "b" }, c: { v: "c" } });
    expect(await failure(client.rerunFlow(ctx, flow.id))).toMatchObject({ status: 409 });
  });

  it("keeps a runner's unreadable report as a poison payload", async () => {
    await submit({ start: true, jobs: [sh("p")] });
    const [d] = await runner.leaseSome();
    if (!d) throw new Error("nothing leased");
    const refused = await runner.report(d, "result", { status: "exploded", result: { n: 1 } });
    expect(refused).toMatchObject({ status: 400, problem: { field: "body.status" } });
    // The dead letter is written after the answer (the request's waitUntil).
    const letters = await eventually(
      async () => {
        const payloads = (await client.listDeadLetters(ctx)).items.filter((l) => l.kind === "payload");
        return payloads.length > 0 ? payloads : undefined;
      },
      10_000,
      20,
      "a payload dead letter",
    );
    expect(letters).toHaveLength(1);
    expect(letters[0]).toMatchObject({
      kind: "payload",
      job_id: d.job_id,
      payload: expect.stringContaining("exploded"),
    });
    expect(await runner.finish(d, { ok: "1" })).toMatchObject({ outcome: "applied" });
  });
});

describe("cancel and pause", () => {
  it("cancels a flow: nothing more runs, in-flight reports are refused, the flow says so", async () => {
    const flow = await submit({ start: true, jobs: [sh("a"), sh("b", ["a"])] });
    const [a] = await runner.leaseSome();
    if (!a) throw new Error("nothing leased");
    await runner.report(a, "ack");
    await runner.report(a, "started");
    const cancelled = await client.cancelFlow(ctx, flow.id, "changed my mind");
    expect(cancelled).toMatchObject({ status: "error", error: { job: 0, reason: "cancelled: changed my mind" } });
    expect(cancelled.jobs.map((j) => j.status)).toEqual(["error", "error"]);
    expect(await runner.report(a, "heartbeat")).toMatchObject({ status: 409 });
    expect(await runner.lease()).toEqual([]);
    // A second cancel (a client's retry of the first) finds the flow ended: 409, and nothing moves.
    const before = await footprint(flow.id);
    const twice = await failure(client.cancelFlow(ctx, flow.id, "again"));
    expect([twice.status, twice.code, twice.problem.flow_status]).toEqual([409, "conflict", "error"]);
    expect(twice.problem.detail).toBe(`flow ${flow.id} already ended (error): nothing is left to cancel`);
    expect(await footprint(flow.id)).toEqual(before);
    expect((await client.loadFlow(ctx, flow.id)).error?.reason).toBe("cancelled: changed my mind");
  });

  it("refuses to cancel a finished flow: 409 naming its status, no record, event, figure or mail written", async () => {
    const flow = await submit({ start: true, jobs: [sh("done")] });
    const [d] = await runner.leaseSome();
    if (!d) throw new Error("nothing leased");
    await runner.finish(d, { v: "1" });
    const before = await footprint(flow.id);
    expect(before.status).toBe("finished");
    expect(before.figures).toBeGreaterThan(0); // the end pushed its figures: a cancel must not push more
    for (const reason of ["too late", "still too late"]) {
      const refused = await failure(client.cancelFlow(ctx, flow.id, reason));
      expect([refused.status, refused.code, refused.problem.flow_status]).toEqual([409, "conflict", "finished"]);
      expect(refused.problem.status).toBe(409); // the document's own status stays the HTTP one
      expect(refused.problem.detail).toBe(`flow ${flow.id} already ended (finished): nothing is left to cancel`);
    }
    expect(await footprint(flow.id)).toEqual(before);
    // JSON-RPC answers the same conflict.
    const rpc = await failure(client.rpc("flow.cancel", { context_id: ctx, id: flow.id }));
    expect([rpc.rpcCode, rpc.status, rpc.problem.flow_status]).toEqual([-32009, 409, "finished"]);
  });

  it("still cancels a failed flow whose other job runs (stopping it), then refuses", async () => {
    const flow = await submit({ start: true, jobs: [sh("bad"), sh("slow")] });
    const leased = await runner.leaseSome(2);
    const bad = leased.find((d) => jobName(d) === "bad");
    const slow = leased.find((d) => jobName(d) === "slow");
    if (!bad || !slow) throw new Error("both jobs should be leased");
    await runner.report(slow, "ack");
    await runner.fail(bad, "exit code 2");
    const failed = await client.loadFlow(ctx, flow.id);
    expect([failed.status, failed.jobs.find((j) => j.key === "slow")?.status]).toEqual(["error", "dispatched"]);
    const cancelled = await client.cancelFlow(ctx, flow.id, "stop slow");
    // The flow keeps the error it ended with; the job still running is stopped.
    expect(cancelled.error).toMatchObject({ reason: "exit code 2" });
    expect(cancelled.jobs.find((j) => j.key === "slow")).toMatchObject({
      status: "error",
      error: "cancelled: stop slow",
    });
    expect(await runner.report(slow, "heartbeat")).toMatchObject({ status: 409 });
    expect((await failure(client.cancelFlow(ctx, flow.id))).problem.flow_status).toBe("error");
  });

  it("holds dispatch while a context is paused, and lets it go on resume", async () => {
    expect(await client.setPaused(ctx, true)).toEqual({ context_id: ctx, paused: true });
    const flow = await submit({ start: true, jobs: [sh("held")] });
    await new Promise((r) => setTimeout(r, 100));
    expect(await runner.lease()).toEqual([]);
    expect(await w.redis.exec<number>(["LLEN", w.keys.queue(ctx, "sh", flow.id)])).toBe(1);
    expect(await client.setPaused(ctx, false)).toEqual({ context_id: ctx, paused: false });
    const [d] = await runner.leaseSome();
    if (!d) throw new Error("nothing leased after resume");
    await runner.finish(d);
    expect((await client.loadFlow(ctx, flow.id)).status).toBe("finished");
  });
});
