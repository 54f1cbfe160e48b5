import { runDurableObjectAlarm } from "cloudflare:test";
import { afterAll, beforeAll, beforeEach, describe, expect, it } from "vitest";
import { coordinatorName, type FlowScope } from "../../functions/flow/scope.js";
import type { CoordinatorClient } from "../../shared/client/index.js";
import type { DeadLetter, FlowView } from "../../shared/model/index.js";
import { BASE, testWorker } from "./harness.js";
import { flowOf, jobName, PullRunner } from "./pull-runner.js";

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

const sh = (name: string, depends: string[] = [], extra: Record<string, unknown> = {}) => ({ name, script: `echo ${name}`, script_type: "sh", depends, ...extra });
const submit = (body: unknown) => client.request("POST", `/v1/contexts/${ctx}/flows`, body) as Promise<FlowView>;
const fast = { retry_base_ms: 10, retry_cap_ms: 20 };

function stubOf(flowId: number) {
  const scope: FlowScope = { prefix: w.prefix, contextId: ctx, flowId, origin: BASE };
  return w.env.FLOW_COORDINATOR.get(w.env.FLOW_COORDINATOR.idFromName(coordinatorName(scope)));
}

/** Rings the flow's alarm until the condition holds (the alarm holds the nearest deadline). */
async function ringUntil(flowId: number, done: (view: FlowView) => boolean): Promise<FlowView> {
  for (let i = 0; i < 100; i++) {
    const view = await flowOf(client, ctx, flowId);
    if (done(view)) return view;
    await runDurableObjectAlarm(stubOf(flowId));
    await new Promise((r) => setTimeout(r, 30));
  }
  throw new Error("the flow never got there");
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
    const waiting = await flowOf(client, ctx, flow.id);
    expect(waiting.jobs[0]).toMatchObject({ status: "dispatched", error: "exit code 1" });
    expect([1, 2]).toContain(waiting.jobs[0]?.attempt);
    await ringUntil(flow.id, (v) => (v.jobs[0]?.attempt ?? 0) === 2);
    const [second] = await other.leaseSome();
    if (!second) throw new Error("the retry was not dispatched");
    expect(second.attempt).toBe(2);
    expect(second.message.avoid_runner_id).toBe(runner.id);
    expect(second.message.job[0]?.env_vars.JOB_ATTEMPT).toBe("2");
    expect(await runner.report(first, "result", { status: "finished", result: {} })).toMatchObject({ status: 409, code: "stale-attempt" });
    await other.finish(second, { ok: "yes" });
    const view = await flowOf(client, ctx, flow.id);
    expect(view.status).toBe("finished");
    const failedMessage = (await client.request("GET", `/v1/contexts/${ctx}/messages/${second.message.caller_id}/${first.message.id}`)) as { status: string };
    expect(failedMessage.status).toBe("error");
  });

  it("renews a running job's lease with each heartbeat, and fails it when it goes silent", async () => {
    const flow = await submit({ start: true, timeouts: { ...fast, timeout_result: 1 }, jobs: [sh("long", [], { timeout: 30 })] });
    const [d] = await runner.leaseSome();
    if (!d) throw new Error("nothing leased");
    await runner.report(d, "ack");
    await runner.report(d, "started");
    for (let i = 0; i < 4; i++) {
      await new Promise((r) => setTimeout(r, 400));
      await runner.report(d, "heartbeat");
      await runDurableObjectAlarm(stubOf(flow.id));
    }
    expect((await flowOf(client, ctx, flow.id)).jobs[0]?.status).toBe("started");
    await new Promise((r) => setTimeout(r, 1100));
    const view = await ringUntil(flow.id, (v) => v.status === "error");
    expect(view.error?.reason).toMatch(/^attempt 1 went silent: no result, heartbeat or log for 1 s$/);
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
    expect((await flowOf(client, ctx, flow.id)).status).toBe("error");

    const letters = (await client.request("GET", `/v1/contexts/${ctx}/deadletters`)) as { items: DeadLetter[] };
    const letter = letters.items.find((l) => l.job_key === "b");
    expect(letter).toMatchObject({ kind: "job", flow_id: flow.id, attempts: 1, reason: "exit code 7" });
    expect(await client.request("GET", `/v1/contexts/${ctx}/deadletters/${encodeURIComponent(letter?.id ?? "")}`)).toEqual(letter);

    const again = (await client.request("POST", `/v1/contexts/${ctx}/flows/${flow.id}/rerun`)) as FlowView;
    expect(again.status).toBe("started");
    expect(again.jobs.map((j) => [j.key, j.status])).toEqual([["a", "finished"], ["b", "dispatched"], ["c", "waiting_for_prerequisites"]]);
    const ran: string[] = [];
    for (let round = 0; round < 20 && ran.length < 2; round++) {
      for (const d of await runner.leaseSome()) {
        ran.push(`${jobName(d)}@${d.attempt}`);
        await runner.finish(d, { v: jobName(d) });
      }
    }
    expect(ran).toEqual(["b@2", "c@1"]);
    const view = await flowOf(client, ctx, flow.id);
    expect(view.status).toBe("finished");
    expect(view.result).toEqual({ a: { v: "a" }, b: { v: "b" }, c: { v: "c" } });
    const rerunAgain = await client.request("POST", `/v1/contexts/${ctx}/flows/${flow.id}/rerun`).catch((e: { status: number }) => e);
    expect(rerunAgain).toMatchObject({ status: 409 });
  });

  it("keeps a runner's unreadable report as a poison payload", async () => {
    await submit({ start: true, jobs: [sh("p")] });
    const [d] = await runner.leaseSome();
    if (!d) throw new Error("nothing leased");
    const refused = await runner.report(d, "result", { status: "exploded", result: { n: 1 } });
    expect(refused).toMatchObject({ status: 400, problem: { field: "body.status" } });
    let letters: DeadLetter[] = [];
    for (let i = 0; i < 50 && letters.length === 0; i++) {
      letters = ((await client.request("GET", `/v1/contexts/${ctx}/deadletters`)) as { items: DeadLetter[] }).items.filter((l) => l.kind === "payload");
      await new Promise((r) => setTimeout(r, 20));
    }
    expect(letters[0]).toMatchObject({ kind: "payload", job_id: d.job_id, payload: expect.stringContaining("exploded") });
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
    const cancelled = (await client.request("POST", `/v1/contexts/${ctx}/flows/${flow.id}/cancel`, { reason: "changed my mind" })) as FlowView;
    expect(cancelled).toMatchObject({ status: "error", error: { job: 0, reason: "cancelled: changed my mind" } });
    expect(cancelled.jobs.map((j) => j.status)).toEqual(["error", "error"]);
    expect(await runner.report(a, "heartbeat")).toMatchObject({ status: 409 });
    expect(await runner.lease()).toEqual([]);
    const twice = (await client.request("POST", `/v1/contexts/${ctx}/flows/${flow.id}/cancel`, {})) as FlowView;
    expect(twice.error?.reason).toBe("cancelled: changed my mind");
  });

  it("holds dispatch while a context is paused, and lets it go on resume", async () => {
    expect(await client.request("POST", `/v1/contexts/${ctx}/pause`)).toEqual({ context_id: ctx, paused: true });
    const flow = await submit({ start: true, jobs: [sh("held")] });
    await new Promise((r) => setTimeout(r, 100));
    expect(await runner.lease()).toEqual([]);
    expect(await w.redis.exec<number>(["LLEN", `${w.prefix}ctx:{${ctx}}:msg_out`])).toBe(1);
    expect(await client.request("POST", `/v1/contexts/${ctx}/resume`)).toEqual({ context_id: ctx, paused: false });
    const [d] = await runner.leaseSome();
    if (!d) throw new Error("nothing leased after resume");
    await runner.finish(d);
    expect((await flowOf(client, ctx, flow.id)).status).toBe("finished");
  });
});
