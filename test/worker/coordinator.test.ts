import { abortAllDurableObjects, createScheduledController, evictDurableObject, runDurableObjectAlarm, runInDurableObject } from "cloudflare:test";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import worker from "../../functions/index.js";
import { coordinatorName, type FlowScope } from "../../functions/flow/scope.js";
import type { FlowView } from "../../shared/model/index.js";
import { testWorker, BASE } from "./harness.js";
import { flowOf, jobName, PullRunner } from "./pull-runner.js";

// The FlowCoordinator Durable Object and the supervisor's sweep, inside workerd.

const w = testWorker("coordinator");
afterAll(() => w.cleanup());

let admin: Awaited<ReturnType<typeof w.newActor>>;

beforeAll(async () => {
  admin = await w.newActor();
});

const sh = (name: string, depends: string[] = []) => ({ name, script: `echo ${name}`, script_type: "sh", depends });

function stubOf(contextId: number, flowId: number) {
  const scope: FlowScope = { prefix: w.prefix, contextId, flowId, origin: BASE };
  return { scope, stub: w.env.FLOW_COORDINATOR.get(w.env.FLOW_COORDINATOR.idFromName(coordinatorName(scope))) };
}

async function sweep(): Promise<void> {
  const ctx = { waitUntil: () => {}, passThroughOnException: () => {}, props: {} } as unknown as ExecutionContext;
  let done: Promise<unknown> = Promise.resolve();
  worker.scheduled(createScheduledController({ scheduledTime: Date.now(), cron: "* * * * *" }), w.env, {
    ...ctx,
    waitUntil: (p: Promise<unknown>) => {
      done = p;
    },
  } as ExecutionContext);
  await done;
}

describe("FlowCoordinator", () => {
  it("keeps one state machine per flow: its own view is the API's view", async () => {
    const ctx = (await admin.client.createContext()).id;
    const flow = (await admin.client.request("POST", `/v1/contexts/${ctx}/flows`, { jobs: [sh("a"), sh("b", ["a"])] })) as FlowView;
    const { scope, stub } = stubOf(ctx, flow.id);
    const inside = await runInDurableObject(stub, async (instance) => instance.view(scope));
    expect("ok" in inside && inside.ok?.jobs.map((j) => j.key)).toEqual(["a", "b"]);
  });

  it("fails a job whose message was not delivered in time, when its alarm rings", async () => {
    const ctx = (await admin.client.createContext()).id; // no runner at all
    const flow = (await admin.client.request("POST", `/v1/contexts/${ctx}/flows`, { start: true, timeouts: { timeout: 1 }, jobs: [sh("lonely"), sh("next", ["lonely"])] })) as FlowView;
    const { stub } = stubOf(ctx, flow.id);
    await new Promise((r) => setTimeout(r, 1100));
    expect(await runDurableObjectAlarm(stub)).toBe(true);
    const view = await flowOf(admin.client, ctx, flow.id);
    expect(view.status).toBe("error");
    expect(view.error).toMatchObject({ name: "lonely", reason: "attempt 1 was not delivered to a runner within 1 s" });
    expect(view.jobs.find((j) => j.key === "next")?.status).toBe("error");
  });

  it("rebuilds itself from Redis and its journal after eviction, mid-flow", async () => {
    const ctx = (await admin.client.createContext()).id;
    const runner = await PullRunner.register(w, admin.client, ctx);
    const flow = (await admin.client.request("POST", `/v1/contexts/${ctx}/flows`, { start: true, jobs: [sh("a"), sh("b", ["a"]), sh("c", ["b"])] })) as FlowView;
    const [a] = await runner.leaseSome();
    if (!a) throw new Error("nothing leased");
    await runner.finish(a, { v: "a" });
    const [b] = await runner.leaseSome();
    if (!b) throw new Error("nothing leased");
    await runner.report(b, "ack");
    await runner.report(b, "started");
    const { stub } = stubOf(ctx, flow.id);
    await evictDurableObject(stub);
    const rebuilt = await flowOf(admin.client, ctx, flow.id);
    expect(rebuilt.jobs.map((j) => [j.key, j.status, j.runner_id])).toEqual([
      ["a", "finished", runner.id],
      ["b", "started", runner.id],
      ["c", "waiting_for_prerequisites", undefined],
    ]);
    expect(await runner.report(b, "result", { status: "finished", result: { v: "b" } })).toMatchObject({ outcome: "applied" });
    const [c] = await runner.leaseSome();
    if (!c) throw new Error("nothing leased");
    expect(jobName(c)).toBe("c");
    expect(c.message.job[0]?.env_vars.DEP_B_V).toBe("b");
    await runner.finish(c);
    expect((await flowOf(admin.client, ctx, flow.id)).status).toBe("finished");
  });

  it("carries on after every Durable Object was reset mid-flow", async () => {
    const ctx = (await admin.client.createContext()).id;
    const runner = await PullRunner.register(w, admin.client, ctx);
    const flow = (await admin.client.request("POST", `/v1/contexts/${ctx}/flows`, { start: true, jobs: [sh("a"), sh("b"), sh("c", ["a", "b"])] })) as FlowView;
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
    const view = await flowOf(admin.client, ctx, flow.id);
    expect(view.status).toBe("finished");
    expect(view.jobs.map((j) => j.attempt)).toEqual([1, 1, 1]);
  });
});

describe("the supervisor's sweep", () => {
  it("relays what was left in msg_out once a runner exists, and overlapping sweeps deliver each job once", async () => {
    const ctx = (await admin.client.createContext()).id;
    const flow = (await admin.client.request("POST", `/v1/contexts/${ctx}/flows`, { start: true, jobs: [sh("x"), sh("y"), sh("z")] })) as FlowView;
    await new Promise((r) => setTimeout(r, 100)); // the coordinator's own relay finds no runner
    const left = await w.redis.exec<number>(["LLEN", `${w.prefix}ctx:{${ctx}}:msg_out`]);
    expect(left).toBe(3);
    const runner = await PullRunner.register(w, admin.client, ctx);
    // The context is due for the sweep (its flow started); make it due now.
    await w.redis.exec(["ZADD", `${w.prefix}sweep:due`, "1", String(ctx)]);
    await Promise.all([sweep(), sweep(), sweep()]);
    const deliveries = await runner.leaseSome(3);
    expect(deliveries.map(jobName).sort()).toEqual(["x", "y", "z"]);
    expect(await runner.lease()).toEqual([]);
    for (const d of deliveries) await runner.finish(d);
    expect((await flowOf(admin.client, ctx, flow.id)).status).toBe("finished");
  });

  it("pokes flows whose check time passed, which act on their deadlines", async () => {
    const ctx = (await admin.client.createContext()).id;
    const flow = (await admin.client.request("POST", `/v1/contexts/${ctx}/flows`, { start: true, timeouts: { timeout: 1 }, jobs: [sh("late")] })) as FlowView;
    await new Promise((r) => setTimeout(r, 1100));
    await w.redis.exec(["ZADD", `${w.prefix}sweep:due`, "1", String(ctx)]);
    await sweep();
    expect((await flowOf(admin.client, ctx, flow.id)).status).toBe("error");
    const entry = await w.redis.exec<string | null>(["ZSCORE", `${w.prefix}ctx:{${ctx}}:deadlines`, `flow:${flow.id}`]);
    expect(entry).toBeNull();
  });
});
