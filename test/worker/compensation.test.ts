import { evictDurableObject, runDurableObjectAlarm, runInDurableObject } from "cloudflare:test";
import { afterAll, beforeAll, beforeEach, describe, expect, it } from "vitest";
import type { CoordinatorClient } from "../../shared/client/index.js";
import type { FlowSubmissionInput } from "../../shared/flow/index.js";
import type { DeliveryPayload, FlowView } from "../../shared/model/index.js";
import { eventually } from "../support/eventually.js";
import { testWorker } from "./harness.js";
import { jobName, PullRunner } from "./pull-runner.js";

// Sagas inside workerd on real Redis: the unwinding survives its Durable Object losing its
// memory (and its journal), and what it writes to Redis (statuses, indexes, retention's set).

const w = testWorker("compensation");
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

const step = (name: string, depends: string[] = []): NonNullable<FlowSubmissionInput["jobs"]>[number] => ({
  name,
  script: `echo ${name}`,
  script_type: "sh",
  depends,
  compensate: { script: `echo undo ${name}`, script_type: "sh" },
});
const SAGA: FlowSubmissionInput = {
  start: true,
  jobs: [step("book"), step("charge", ["book"]), step("ship", ["charge"])],
};

/** Leases exactly one delivery, and says which job it is. */
async function leaseOne(): Promise<DeliveryPayload> {
  const [d, ...more] = await runner.leaseSome(1);
  if (!d || more.length > 0) throw new Error(`leased ${1 + more.length} deliveries, not one`);
  return d;
}

const statusOf = (view: FlowView, key: string) => view.jobs.find((j) => j.key === key)?.status;

/** Rings the flow's alarm until the condition holds (the alarm holds its nearest deadline). */
function ringUntil(flowId: number, done: (view: FlowView) => boolean): Promise<FlowView> {
  return eventually(
    async () => {
      const view = await client.loadFlow(ctx, flowId);
      if (done(view)) return view;
      await runDurableObjectAlarm(w.flowStub(ctx, flowId).stub);
      return undefined;
    },
    10_000,
    100,
    `flow ${flowId} getting there`,
  );
}

/** The saga run until ship failed: charge's compensation leased (and acknowledged), book's waiting. */
async function unwinding(saga = SAGA): Promise<{ flowId: number; refund: DeliveryPayload }> {
  const flow = await client.submitFlow(ctx, saga);
  await runner.finish(await leaseOne(), { booking: "B-1" });
  await runner.finish(await leaseOne(), { payment: "P-2" });
  await runner.fail(await leaseOne(), "out of stock");
  const refund = await leaseOne();
  expect(jobName(refund)).toBe("charge.compensate");
  expect(refund.message.job[0]).toMatchObject({ compensates: flow.jobs[1]?.id });
  expect(refund.message.job[0]?.env_vars).toMatchObject({
    COMPENSATE_JOB: "charge",
    COMPENSATE_PAYMENT: "P-2",
    COMPENSATE_RESULT: '{"payment":"P-2"}',
  });
  await runner.report(refund, "ack");
  await runner.report(refund, "started");
  return { flowId: flow.id, refund };
}

describe("an unwinding flow", () => {
  it("is rebuilt after its object lost its memory, and carries on", async () => {
    const { flowId, refund } = await unwinding();
    const before = await client.loadFlow(ctx, flowId);
    expect(before.status).toBe("compensating");
    await evictDurableObject(w.flowStub(ctx, flowId).stub);
    const after = await client.loadFlow(ctx, flowId);
    expect(after).toMatchObject({ status: "compensating", compensating_at: before.compensating_at });
    expect(after.error).toEqual(before.error);
    expect(after.jobs.map((j) => [j.key, j.status])).toEqual(before.jobs.map((j) => [j.key, j.status]));
    // Reports of the running compensation are taken; a repeat of one is a duplicate.
    await runner.finish(refund, { refund: "R-3" });
    expect(await runner.report(refund, "result", { status: "finished", result: { refund: "R-3" } })).toMatchObject({
      outcome: "duplicate",
    });
    const unbook = await leaseOne();
    expect(jobName(unbook)).toBe("book.compensate");
    await runner.finish(unbook);
    const view = await client.loadFlow(ctx, flowId);
    expect(view.status).toBe("compensated");
    expect(statusOf(view, "ship.compensate")).toBe("skipped");
  });

  it("is rebuilt from Redis alone when its journal went too: the compensation running counts as dispatched", async () => {
    // Deliveries must be taken within a second; each compensation has a retry.
    const jobs = (SAGA.jobs ?? []).map((j) => ({ ...j, compensate: { ...j.compensate, retries: 1 } }));
    const saga = { ...SAGA, jobs, timeouts: { timeout: 1, retry_base_ms: 10, retry_cap_ms: 20 } };
    const { flowId, refund } = await unwinding(saga as FlowSubmissionInput);
    const { stub } = w.flowStub(ctx, flowId);
    await runInDurableObject(stub, async (instance, state) => {
      const keys = [...(await state.storage.list({ prefix: "journal:" })).keys()];
      await state.storage.delete(keys);
      (instance as unknown as { flow: { forget(): void } }).flow.forget();
    });
    const view = await client.loadFlow(ctx, flowId);
    expect(view.status).toBe("compensating");
    expect(view.jobs.find((j) => j.key === "charge.compensate")).toMatchObject({ status: "dispatched", attempt: 1 });
    expect(statusOf(view, "book.compensate")).toBe("waiting_for_prerequisites");
    expect(view.jobs.find((j) => j.key === "book.compensate")?.waiting).toMatchObject({ reason: "dependencies" });
    // Its delivery is not known any more: the runner's report is refused, and the attempt's
    // delivery deadline fails it, as any job's; its retry runs, and the unwinding goes on.
    expect(await runner.report(refund, "result", { status: "finished", result: {} })).toMatchObject({ status: 403 });
    await ringUntil(flowId, (v) => v.jobs.find((j) => j.key === "charge.compensate")?.attempt === 2);
    const again = await leaseOne();
    expect([jobName(again), again.attempt]).toEqual(["charge.compensate", 2]);
    await runner.finish(again);
    await runner.finish(await leaseOne());
    expect((await client.loadFlow(ctx, flowId)).status).toBe("compensated");
  });

  it("unwinds after its clean-up even when the object lost its memory while the clean-up ran", async () => {
    // ship fails while a clean-up (needs: all_done) still has to run: the flow waits for it
    // before unwinding. The failure must be durable then, not only in the object's memory.
    const cleanup = { name: "notify", script: "echo bye", script_type: "sh" as const, depends: ["ship"] };
    const flow = await client.submitFlow(ctx, {
      ...SAGA,
      jobs: [...(SAGA.jobs ?? []), { ...cleanup, needs: "all_done" }],
    });
    await runner.finish(await leaseOne());
    await runner.finish(await leaseOne());
    await runner.fail(await leaseOne(), "out of stock");
    const notify = await leaseOne();
    expect(jobName(notify)).toBe("notify");
    const flowKey = w.keys.flow(ctx, flow.id);
    expect(JSON.parse(String(await w.redis.exec(["HGET", flowKey, "error"])))).toMatchObject({ name: "ship" });
    await evictDurableObject(w.flowStub(ctx, flow.id).stub);
    const rebuilt = await client.loadFlow(ctx, flow.id);
    expect(rebuilt).toMatchObject({ status: "started", error: { name: "ship", reason: "out of stock" } });
    await runner.finish(notify);
    const refund = await leaseOne();
    expect(jobName(refund)).toBe("charge.compensate");
    await runner.finish(refund);
    await runner.finish(await leaseOne());
    expect((await client.loadFlow(ctx, flow.id)).status).toBe("compensated");
  });

  it("never begins in storage on a flow storage holds as ended: a memory that missed the end reads it back", async () => {
    const flow = await client.submitFlow(ctx, SAGA);
    await runner.finish(await leaseOne(), { booking: "B-1" });
    await runner.finish(await leaseOne(), { payment: "P-2" });
    const ship = await leaseOne();
    // An end the object's memory missed (as a commit of unknown outcome that landed late would be).
    const flowKey = w.keys.flow(ctx, flow.id);
    const endedAt = String(Math.floor(Date.now() / 1000));
    await w.redis.exec(["HSET", flowKey, "status", "error", "ended_at", endedAt]);
    // Ship fails: the memory unwinds, but the batch's unwinding is not written onto the ended flow.
    await runner.fail(ship, "out of stock");
    expect(await w.redis.exec<string[]>(["HMGET", flowKey, "status", "compensating_at", "ended_at"])).toEqual([
      "error",
      null,
      endedAt,
    ]);
    // Read back, the flow is as storage holds it: ended, not left unwinding with an end.
    expect((await client.loadFlow(ctx, flow.id)).status).toBe("error");
  });

  it("writes its statuses to Redis: the record, the status indexes, retention's set; and can be deleted", async () => {
    const { flowId, refund } = await unwinding();
    const flowKey = w.keys.flow(ctx, flowId);
    const inIndex = async (status: "started" | "compensating" | "compensated") =>
      (await w.redis.exec<number | null>(["ZSCORE", w.keys.flowsByStatus(ctx, status), String(flowId)])) !== null;
    expect(await w.redis.exec<string[]>(["HMGET", flowKey, "status", "compensating_at", "ended_at"])).toEqual([
      "compensating",
      expect.stringMatching(/^\d+$/),
      null,
    ]);
    expect(JSON.parse(String(await w.redis.exec(["HGET", flowKey, "error"])))).toMatchObject({ name: "ship" });
    expect([await inIndex("started"), await inIndex("compensating")]).toEqual([false, true]);
    await runner.finish(refund);
    await runner.finish(await leaseOne());
    expect(await w.redis.exec<string>(["HGET", flowKey, "status"])).toBe("compensated");
    expect([await inIndex("compensating"), await inIndex("compensated")]).toEqual([false, true]);
    const ended = await w.redis.exec<number | null>(["ZSCORE", w.keys.ended(ctx, "error"), `flow:${flowId}`]);
    expect(ended).not.toBeNull();
    // A compensation's record names the job it undoes.
    const view = await client.loadFlow(ctx, flowId);
    const undo = view.jobs.find((j) => j.key === "book.compensate");
    expect(await w.redis.exec<string>(["HGET", w.keys.job(ctx, view.caller_id, undo?.id ?? 0), "compensates"])).toBe(
      String(view.jobs[0]?.id),
    );
    await client.request("DELETE", `/v1/contexts/${ctx}/flows/${flowId}`);
    expect(await w.redis.exec<number>(["EXISTS", flowKey])).toBe(0);
  });

  it("is asked for through JSON-RPC's flow.cancel with compensate; asked again, the same answer", async () => {
    const flow = await client.submitFlow(ctx, SAGA);
    await runner.finish(await leaseOne());
    const params = { context_id: ctx, id: flow.id, reason: "stop", compensate: true };
    const first = await client.rpc<FlowView>("flow.cancel", params);
    expect(first.status).toBe("compensating");
    const again = await client.rpc<FlowView>("flow.cancel", params);
    expect(again.status).toBe("compensating");
    const unbook = await leaseOne();
    expect(jobName(unbook)).toBe("book.compensate");
    await runner.finish(unbook);
    expect((await client.loadFlow(ctx, flow.id)).status).toBe("compensated");
  });
});

describe("a child flow that is a saga", () => {
  /** The child: `hold` (a sleep of 0, with a compensation), then a wait that only the test could end. */
  const trip = (name: string) =>
    client.templates.put(ctx, name, {
      inputs: { key: { type: "string" } },
      jobs: [
        { name: "hold", sleep: 0, compensate: { script: "echo release", script_type: "sh" } },
        { name: "go", depends: ["hold"], wait: { event: "trip.go", key: "${inputs.key}", timeout: 600 } },
      ],
    });

  it("unwinds what it did when its parent fails (it is cancelled with compensate)", async () => {
    await trip("trip");
    const parent = await client.submitFlow(ctx, {
      start: true,
      jobs: [
        { name: "trip", flow: { template: "trip", inputs: { key: "t1" } } },
        { name: "boom", script: "exit 1", script_type: "sh" },
      ],
    });
    const childId = await eventually(
      async () => (await client.loadFlow(ctx, parent.id)).jobs.find((j) => j.key === "trip")?.child_flow_id,
      20_000,
      50,
      "the child",
    );
    await eventually(
      async () => statusOf(await client.loadFlow(ctx, childId), "go") === "started" || undefined,
      20_000,
      50,
      "the child's wait",
    );
    await runner.fail(await leaseOne(), "exit code 1");
    // The parent failed; its child was cancelled with compensate: hold's compensation runs.
    const release = await leaseOne();
    expect([jobName(release), release.flow_id]).toEqual(["hold.compensate", childId]);
    await runner.finish(release);
    const child = await eventually(
      async () => {
        const view = await client.loadFlow(ctx, childId);
        return view.status === "compensated" ? view : undefined;
      },
      20_000,
      50,
      "the child's unwinding",
    );
    expect(child.error?.reason).toMatch(/its parent flow \d+ ended its job/);
    expect((await client.loadFlow(ctx, parent.id)).status).toBe("error");
  });
});
