import { abortAllDurableObjects, evictDurableObject, runInDurableObject } from "cloudflare:test";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { generateKeyPair } from "../../shared/auth/index.js";
import { deadlineMember } from "../../shared/keys.js";
import { eventually } from "../support/eventually.js";
import { ringAlarm, takeAlarm, testWorker, waitUntilPast } from "./harness.js";
import { jobName, PullRunner } from "./pull-runner.js";

// The FlowCoordinator Durable Object and the supervisor's sweep, inside workerd.

const w = testWorker("coordinator");
afterAll(() => w.cleanup());

let admin: Awaited<ReturnType<typeof w.newActor>>;

beforeAll(async () => {
  admin = await w.newActor();
});

const sh = (name: string, depends: string[] = []) => ({
  name,
  script: `echo ${name}`,
  script_type: "sh" as const,
  depends,
});

describe("FlowCoordinator", () => {
  it("keeps one state machine per flow: its own view is the API's view", async () => {
    const ctx = (await admin.client.createContext()).id;
    const flow = await admin.client.submitFlow(ctx, { jobs: [sh("a"), sh("b", ["a"])] });
    const { scope, stub } = w.flowStub(ctx, flow.id);
    const inside = await runInDurableObject(stub, async (instance) => instance.view(scope));
    expect("ok" in inside && inside.ok?.jobs.map((j) => j.key)).toEqual(["a", "b"]);
  });

  it("fails a job whose message was not delivered in time, when its alarm rings", async () => {
    const ctx = (await admin.client.createContext()).id;
    // A pull runner that never leases: the message waits in its queue, and nothing but the job's
    // delivery deadline sets the flow's alarm (no relay retry).
    await PullRunner.register(w, admin.client, ctx);
    const flow = await admin.client.submitFlow(ctx, {
      start: true,
      timeouts: { timeout: 3 },
      jobs: [sh("lonely"), sh("next", ["lonely"])],
    });
    const { stub } = w.flowStub(ctx, flow.id);
    // The alarm is set for the deadline; taken away, it cannot ring by itself while that passes.
    const alarm = await takeAlarm(stub);
    expect(alarm === null ? null : Math.floor(alarm / 1000)).toBe(flow.next_deadline);
    await waitUntilPast(alarm as number);
    expect((await admin.client.loadFlow(ctx, flow.id)).status).toBe("started");

    await ringAlarm(stub);
    const view = await admin.client.loadFlow(ctx, flow.id);
    expect(view.status).toBe("error");
    expect(view.error).toMatchObject({
      name: "lonely",
      reason:
        "attempt 1 was not delivered to a runner within 3 s: waiting for a pull runner of script type sh to lease it",
    });
    expect(view.jobs.find((j) => j.key === "next")?.status).toBe("error");
  });

  it("rebuilds itself from Redis and its journal after eviction, mid-flow", async () => {
    const ctx = (await admin.client.createContext()).id;
    const runner = await PullRunner.register(w, admin.client, ctx);
    const flow = await admin.client.submitFlow(ctx, { start: true, jobs: [sh("a"), sh("b", ["a"]), sh("c", ["b"])] });
    const [a] = await runner.leaseSome();
    if (!a) throw new Error("nothing leased");
    await runner.finish(a, { v: "a" });
    const [b] = await runner.leaseSome();
    if (!b) throw new Error("nothing leased");
    await runner.report(b, "ack");
    await runner.report(b, "started");
    const { stub } = w.flowStub(ctx, flow.id);
    await evictDurableObject(stub);
    const rebuilt = await admin.client.loadFlow(ctx, flow.id);
    expect(rebuilt.jobs.map((j) => [j.key, j.status, j.runner_id])).toEqual([
      ["a", "finished", runner.id],
      ["b", "started", runner.id],
      ["c", "waiting_for_prerequisites", undefined],
    ]);
    expect(await runner.report(b, "result", { status: "finished", result: { v: "b" } })).toMatchObject({
      outcome: "applied",
    });
    const [c] = await runner.leaseSome();
    if (!c) throw new Error("nothing leased");
    expect(jobName(c)).toBe("c");
    expect(c.message.job[0]?.env_vars.DEP_B_V).toBe("b");
    await runner.finish(c);
    expect((await admin.client.loadFlow(ctx, flow.id)).status).toBe("finished");
  });

  it("keeps a job outside any flow on its own timeouts after eviction", async () => {
    const ctx = (await admin.client.createContext()).id;
    await PullRunner.register(w, admin.client, ctx); // never leases: only the delivery deadline sets the alarm
    const created = (await admin.client.request("POST", `/v1/contexts/${ctx}/jobs`, {
      job: sh("alone"),
      start: true,
      timeouts: { timeout: 3 },
    })) as {
      job: { id: number; caller_id: number };
    };
    const { stub } = w.jobStub(ctx, created.job.caller_id, created.job.id);
    const alarm = await takeAlarm(stub);
    if (alarm === null) throw new Error("the job's delivery deadline set no alarm");
    // Rebuilt from storage alone, the job must still be due 3 s after dispatch, not the default 300 s.
    await evictDurableObject(stub);
    await waitUntilPast(alarm);
    await ringAlarm(stub);
    const job = (await admin.client.request(
      "GET",
      `/v1/contexts/${ctx}/jobs/${created.job.caller_id}/${created.job.id}`,
    )) as { status: string; error?: string };
    expect(job).toMatchObject({
      status: "error",
      error:
        "attempt 1 was not delivered to a runner within 3 s: waiting for a pull runner of script type sh to lease it",
    });
  });

  it("carries on after every Durable Object was reset mid-flow", async () => {
    const ctx = (await admin.client.createContext()).id;
    const runner = await PullRunner.register(w, admin.client, ctx);
    const flow = await admin.client.submitFlow(ctx, { start: true, jobs: [sh("a"), sh("b"), sh("c", ["a", "b"])] });
    const first = await runner.leaseSome(2);
    const [a, b] = first;
    if (!a || !b) throw new Error("nothing leased");
    await runner.finish(a, { v: "a" });
    await runner.report(b, "ack");
    await abortAllDurableObjects();
    await runner.finish(b, { v: "b" });
    const [c] = await runner.leaseSome();
    if (!c) throw new Error("c was not dispatched after the reset");
    expect(JSON.parse(c.message.job[0]?.env_vars.FLOW_INPUTS ?? "{}")).toEqual({ a: { v: "a" }, b: { v: "b" } });
    await runner.finish(c);
    const view = await admin.client.loadFlow(ctx, flow.id);
    expect(view.status).toBe("finished");
    expect(view.jobs.map((j) => j.attempt)).toEqual([1, 1, 1]);
  });
});

describe("the supervisor's sweep", () => {
  it("puts attempts a runner refused back in their queue, leaves the runner alone for a while, and says so", async () => {
    const ctx = (await admin.client.createContext()).id;
    const flow = await admin.client.submitFlow(ctx, { start: true, jobs: [sh("x"), sh("y"), sh("z")] });
    // No runner yet: the attempts wait in the flow's queue for sh.
    await eventually(
      async () => ((await w.redis.exec<number>(["LLEN", w.keys.queue(ctx, "sh", flow.id)])) === 3 ? true : undefined),
      10_000,
      20,
      "3 attempts queued",
    );
    expect((await admin.client.loadFlow(ctx, flow.id)).jobs[0]?.waiting).toEqual({
      reason: "no-runner",
      detail: "no runner of script type sh is registered",
    });
    // Nothing listens at port 9: every delivery fails, and each attempt goes back.
    const runner = await admin.client.createRunner(ctx, {
      pubkey: (await generateKeyPair()).x,
      runner_type: "sh",
      address: "http://127.0.0.1:9/",
      concurrency: 2,
    });
    await Promise.all([w.sweep(), w.sweep()]);
    const health = await eventually(
      async () => {
        const loaded = await admin.client.loadRunner(ctx, runner.id);
        return loaded.dispatch.last_error ? loaded.dispatch : undefined;
      },
      10_000,
      50,
      "a delivery failure recorded",
    );
    expect(health.last_error).toMatch(/could not be reached/);
    expect(health.retry_at).toBeGreaterThanOrEqual(Math.floor(Date.now() / 1000));
    await eventually(
      async () => ((await w.redis.exec<number>(["LLEN", w.keys.queue(ctx, "sh", flow.id)])) === 3 ? true : undefined),
      10_000,
      20,
      "3 attempts back in the queue",
    );
    expect(await w.redis.exec<number>(["ZCARD", w.keys.runnerSlots(ctx, runner.id)])).toBe(0);
    const view = await admin.client.loadFlow(ctx, flow.id);
    for (const job of view.jobs) expect(job.waiting?.reason, JSON.stringify(job)).toBe("runner-refusing");
    await admin.client.cancelFlow(ctx, flow.id, "no runner");
  });

  it("pokes flows whose check time passed, which act on their deadlines", async () => {
    const ctx = (await admin.client.createContext()).id;
    await PullRunner.register(w, admin.client, ctx); // never leases: only the deadline sets the alarm
    const flow = await admin.client.submitFlow(ctx, { start: true, timeouts: { timeout: 3 }, jobs: [sh("late")] });
    // The flow's own alarm is taken away: only the sweep can act on the deadline.
    const alarm = await takeAlarm(w.flowStub(ctx, flow.id).stub);
    expect(alarm).not.toBeNull();
    await waitUntilPast(alarm as number);
    expect((await admin.client.loadFlow(ctx, flow.id)).status).toBe("started");

    await w.redis.exec(["ZADD", w.keys.sweepDue(), "1", String(ctx)]);
    await w.sweep();
    const view = await admin.client.loadFlow(ctx, flow.id);
    expect(view.status).toBe("error");
    expect(view.error).toMatchObject({
      name: "late",
      reason:
        "attempt 1 was not delivered to a runner within 3 s: waiting for a pull runner of script type sh to lease it",
    });
    const entry = await w.redis.exec<string | null>([
      "ZSCORE",
      w.keys.deadlines(ctx),
      deadlineMember({ flowId: flow.id }),
    ]);
    expect(entry).toBeNull();
  });

  it("pokes the other due flows of a context when one of them cannot be read, and keeps the context due", async () => {
    const ctx = (await admin.client.createContext()).id;
    await PullRunner.register(w, admin.client, ctx); // never leases: only the deadlines set the alarms
    const broken = await admin.client.submitFlow(ctx, { start: true, timeouts: { timeout: 2 }, jobs: [sh("broken")] });
    const late = await admin.client.submitFlow(ctx, { start: true, timeouts: { timeout: 3 }, jobs: [sh("late")] });
    // Both alarms are taken away; the first flow's record is corrupt and its object has to read it again.
    await takeAlarm(w.flowStub(ctx, broken.id).stub);
    const alarm = await takeAlarm(w.flowStub(ctx, late.id).stub);
    await w.redis.exec(["HSET", w.keys.flow(ctx, broken.id), "status", "bogus"]);
    await evictDurableObject(w.flowStub(ctx, broken.id).stub);
    await waitUntilPast(alarm as number);

    await w.redis.exec(["ZADD", w.keys.sweepDue(), "1", String(ctx)]);
    await w.sweep();
    expect((await admin.client.loadFlow(ctx, late.id)).status).toBe("error");
    // The broken flow's check time has passed and stays: the context is due again soon.
    expect(Number(await w.redis.exec<string | null>(["ZSCORE", w.keys.sweepDue(), String(ctx)]))).toBeGreaterThan(1);
  });
});
