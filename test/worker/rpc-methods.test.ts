import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { CoordinatorClient } from "../../shared/client/index.js";
import type { DeadLetter, Flow, FlowView } from "../../shared/model/index.js";
import type { Page } from "../../shared/store/index.js";
import { failure, testWorker } from "./harness.js";
import { PullRunner } from "./pull-runner.js";

// The methods POST /rpc gained for the console and the CLI: each over the service function its
// REST route uses, so they answer as the routes do.

const w = testWorker("rpc-methods");
afterAll(() => w.cleanup());

let admin: CoordinatorClient;
let reader: CoordinatorClient;
let readerId: number;
let ctx: number;
let runner: PullRunner;

beforeAll(async () => {
  admin = (await w.newActor()).client;
  const r = await w.newActor();
  reader = r.client;
  readerId = r.actor.id;
  ctx = (await admin.createContext({ readers: [r.actor.id] })).id;
  runner = await PullRunner.register(w, admin, ctx);
});

const one = (name: string) => ({ context_id: ctx, jobs: [{ name, script: `echo ${name}`, script_type: "sh" }] });

describe("methods for operators", () => {
  it("flow.list pages a context's flows and filters them by status", async () => {
    const waiting = await admin.rpc<FlowView>("flow.create", one("waits"));
    const running = await admin.rpc<FlowView>("flow.create", { ...one("runs"), start: true });
    const all = await reader.rpc<Page<Flow>>("flow.list", { context_id: ctx, limit: 1 });
    expect(all).toMatchObject({ total: 2, next: 1 });
    expect(all.items).toHaveLength(1);
    const dispatched = await reader.rpc<Page<Flow>>("flow.list", { context_id: ctx, status: "dispatched" });
    expect(dispatched.items.map((f) => f.id)).toContain(waiting.id);
    expect(dispatched).toEqual(await reader.listFlows(ctx, { status: "dispatched" }));
    expect(await reader.rpc("flow.list", { context_id: ctx, offset: 1 })).toEqual(
      await reader.listFlows(ctx, { offset: 1 }),
    );
    expect(all.items[0]?.id).toBeOneOf([waiting.id, running.id]);
    const bad = await failure(reader.rpc("flow.list", { context_id: ctx, status: "flying" }));
    expect([bad.rpcCode, bad.problem.field]).toEqual([-32602, "params.status"]);
  });

  it("flow.cancel stops a flow with its reason (admins only)", async () => {
    const flow = await admin.rpc<FlowView>("flow.create", { ...one("doomed"), start: true });
    const refused = await failure(reader.rpc("flow.cancel", { context_id: ctx, id: flow.id }));
    expect(refused.rpcCode).toBe(-32003);
    const cancelled = await admin.rpc<FlowView>("flow.cancel", { context_id: ctx, id: flow.id, reason: "enough" });
    expect(cancelled.status).toBe("error");
    expect(cancelled.error?.reason).toContain("enough");
  });

  it("flow.rerun runs a failed flow again, and deadletter.list / .load show what failed", async () => {
    // A context of its own: nothing else for its runner to lease.
    const own = (await admin.createContext({ readers: [readerId] })).id;
    const ownRunner = await PullRunner.register(w, admin, own);
    const flow = await admin.rpc<FlowView>("flow.create", { ...one("flaky"), context_id: own, start: true });
    const [delivery] = await ownRunner.leaseSome(1);
    if (!delivery) throw new Error("nothing leased");
    await ownRunner.fail(delivery, "exit code 3");
    const letters = await reader.rpc<Page<DeadLetter>>("deadletter.list", { context_id: own });
    const letter = letters.items.find((d) => d.flow_id === flow.id);
    expect(letter).toMatchObject({ kind: "job", attempts: 1, reason: "exit code 3" });
    expect(await reader.rpc("deadletter.load", { context_id: own, id: letter?.id })).toEqual(letter);
    const again = await admin.rpc<FlowView>("flow.rerun", { context_id: own, id: flow.id });
    expect(again.status).not.toBe("error");
    const [retry] = await ownRunner.leaseSome(1);
    if (!retry) throw new Error("the re-run was not dispatched");
    await ownRunner.finish(retry);
    expect((await admin.loadFlow(own, flow.id)).status).toBe("finished");
  });

  it("context.list answers the caller's contexts, as its route does", async () => {
    const mine = await reader.rpc<{ items: { id: number }[] }>("context.list", { limit: 500 });
    expect(mine.items.map((c) => c.id)).toContain(ctx);
    expect(mine).toEqual(await reader.request("GET", "/v1/contexts?limit=500"));
    const stranger = await w.newActor();
    expect((await stranger.client.rpc<{ items: unknown[] }>("context.list", { limit: 500 })).items).toEqual([]);
  });

  it("context.pause and context.resume hold and release dispatch", async () => {
    expect(await admin.rpc("context.pause", { id: ctx })).toEqual({ context_id: ctx, paused: true });
    expect((await admin.loadContext(ctx)).paused).toBe(true);
    expect(await admin.rpc("context.resume", { id: ctx })).toEqual({ context_id: ctx, paused: false });
    expect((await admin.loadContext(ctx)).paused ?? false).toBe(false);
  });

  it("runner.list, job.create / job.start / job.cancel / job.rerun and message.inbox answer as their routes", async () => {
    const runners = await reader.rpc<Page<{ id: number }>>("runner.list", { context_id: ctx });
    expect(runners.items.map((r) => r.id)).toContain(runner.id);
    const job = await admin.rpc<{ id: number; caller_id: number; status: string }>("job.create", {
      context_id: ctx,
      job: { name: "single", script: "echo single", script_type: "sh" },
    });
    const started = await admin.rpc<{ id: number; live?: { status: string } }>("job.start", {
      context_id: ctx,
      caller_id: job.caller_id,
      id: job.id,
    });
    expect(started.id).toBe(job.id);
    expect(started.live?.status).toBe("dispatched");
    const byCaller = { context_id: ctx, caller_id: job.caller_id, id: job.id };
    const cancelled = await admin.rpc<{ status: string; error?: string }>("job.cancel", { ...byCaller, reason: "no" });
    expect(cancelled).toMatchObject({ status: "error", error: "cancelled: no" });
    expect((await failure(reader.rpc("job.rerun", byCaller))).rpcCode).toBe(-32003);
    const rerun = await admin.rpc<{ live?: { status: string; attempt: number } }>("job.rerun", byCaller);
    expect(rerun.live).toMatchObject({ status: "dispatched", attempt: 2 });
    const again = await failure(admin.rpc("job.rerun", byCaller));
    expect([again.rpcCode, again.problem.job_status]).toEqual([-32009, "started"]);
    expect(await admin.rpc("message.inbox", { context_id: ctx, max: 5 })).toMatchObject({
      messages: expect.any(Array),
    });
  });

  it("event.send ends the waits for its name and key as its route does: once per id, 409 for an id reused", async () => {
    const flow = await admin.rpc<FlowView>("flow.create", {
      context_id: ctx,
      start: true,
      jobs: [{ name: "approval", wait: { event: "order.approved", key: "rpc-1", timeout: 60 } }],
    });
    const event = { context_id: ctx, id: "rpc-approve-1", name: "order.approved", key: "rpc-1", data: { by: "rpc" } };
    expect(await admin.rpc("event.send", event)).toEqual({ id: event.id, duplicate: false, matched: 1, resumed: 1 });
    expect((await admin.loadFlow(ctx, flow.id)).result.approval).toEqual({ by: "rpc", event_id: event.id });
    expect(await admin.rpc("event.send", event)).toEqual({ id: event.id, duplicate: true, matched: 1, resumed: 0 });
    const reused = await failure(admin.rpc("event.send", { ...event, data: { by: "another" } }));
    expect([reused.status, reused.rpcCode]).toEqual([409, -32009]);
    const refused = await failure(reader.rpc("event.send", { context_id: ctx, name: "order.approved" }));
    expect(refused.rpcCode).toBe(-32003);
    const bad = await failure(admin.rpc("event.send", { context_id: ctx, name: "order approved" }));
    expect([bad.rpcCode, bad.problem.field]).toEqual([-32602, "params.name"]);
  });
});
