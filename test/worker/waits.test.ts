import { runInDurableObject } from "cloudflare:test";
import { afterAll, describe, expect, it } from "vitest";
import { generateKeyPair, runnerKeyId } from "../../shared/auth/index.js";
import type { FlowView } from "../../shared/model/index.js";
import { eventually } from "../support/eventually.js";
import { failure, ringAlarm, testWorker, waitUntilPast } from "./harness.js";

// Waits, sleeps and events through the real Worker in workerd, over Redis: the index of waits,
// the event route's idempotency, kept events, timeouts and sleeps on the flow's alarm, and what
// survives the object's memory being lost.

const w = testWorker("waits");
afterAll(() => w.cleanup());

const waitJob = (key: string, extra: Record<string, unknown> = {}) => ({
  name: "approval",
  wait: { event: "order.approved", key, timeout: 60, ...extra },
});

async function setup() {
  const admin = await w.newActor();
  const ctx = await admin.client.createContext();
  return { admin, ctx };
}

const jobOf = (view: FlowView, name: string) => view.jobs.find((j) => j.name === name);

describe("a wait", () => {
  it("waits (no runner) for its event, which finishes it with the event's data, once", async () => {
    const { admin, ctx } = await setup();
    const view = await admin.client.submitFlow(ctx.id, {
      env_vars: { ORDER: "42" },
      start: true,
      jobs: [waitJob("order-${ORDER}")],
    });
    const waiting = jobOf(view, "approval");
    expect(waiting).toMatchObject({
      kind: "wait",
      status: "started",
      wait: { event: "order.approved", key: "order-42" },
    });
    expect(waiting?.waiting).toMatchObject({
      reason: "event",
      detail: 'waiting for event order.approved with key "order-42"',
    });

    const wrong = await admin.client.sendEvent(ctx.id, { name: "order.approved", key: "order-41", data: { by: "x" } });
    expect(wrong).toMatchObject({ duplicate: false, matched: 0, resumed: 0 });
    const sent = await admin.client.sendEvent(ctx.id, {
      id: "approve-42",
      name: "order.approved",
      key: "order-42",
      data: { by: "alice" },
    });
    expect(sent).toEqual({ id: "approve-42", duplicate: false, matched: 1, resumed: 1 });
    const done = await admin.client.loadFlow(ctx.id, view.id);
    expect(done.status).toBe("finished");
    expect(done.result.approval).toEqual({ by: "alice", event_id: "approve-42" });

    // The same id again is the same event: its wait is offered it again and takes nothing.
    const again = await admin.client.sendEvent(ctx.id, {
      id: "approve-42",
      name: "order.approved",
      key: "order-42",
      data: { by: "alice" },
    });
    expect(again).toEqual({ id: "approve-42", duplicate: true, matched: 1, resumed: 0 });
    const other = await failure(
      admin.client.sendEvent(ctx.id, {
        id: "approve-42",
        name: "order.approved",
        key: "order-42",
        data: { by: "bob" },
      }),
    );
    expect(other.status).toBe(409);
    // The wait left the index when it ended: a new event finds nothing.
    expect(await admin.client.sendEvent(ctx.id, { name: "order.approved", key: "order-42" })).toMatchObject({
      matched: 0,
    });
  });

  it("resumes every wait of the context for that name and key, and a runner of the context may send it", async () => {
    const { admin, ctx } = await setup();
    const flows = await Promise.all(
      [1, 2, 3].map(() => admin.client.submitFlow(ctx.id, { start: true, jobs: [waitJob("all")] })),
    );
    const key = await generateKeyPair();
    const runner = await admin.client.createRunner(ctx.id, { pubkey: key.x, runner_type: "sh", local: true });
    const asRunner = await w.clientFor(key, runnerKeyId(ctx.id, runner.id));
    expect(await asRunner.sendEvent(ctx.id, { name: "order.approved", key: "all" })).toMatchObject({
      matched: 3,
      resumed: 3,
    });
    for (const flow of flows) expect((await admin.client.loadFlow(ctx.id, flow.id)).status).toBe("finished");
  });

  it("is refused to whom may not execute, and bad events get clear errors", async () => {
    const { admin, ctx } = await setup();
    const reader = await w.newActor();
    await admin.client.grant(ctx.id, "readers", reader.actor.id);
    const refused = await failure(reader.client.sendEvent(ctx.id, { name: "order.approved" }));
    expect(refused.status).toBe(403);
    const badName = await failure(admin.client.sendEvent(ctx.id, { name: "order approved" }));
    expect(badName.status).toBe(400);
    expect(JSON.stringify(badName.problem)).toContain("body.name");
    const big = await failure(
      admin.client.sendEvent(ctx.id, { name: "order.approved", data: { blob: "x".repeat(70 * 1024) } }),
    );
    expect(big.status).toBe(400);
    expect(JSON.stringify(big.problem)).toContain("64 KiB");
  });

  it("takes an event its context kept (event_lookback): the earliest still kept", async () => {
    const { admin, ctx } = await setup();
    const tooLong = await failure(admin.client.setLimits(ctx.id, { event_lookback: 86_401 }));
    expect([tooLong.status, tooLong.problem.field]).toEqual([400, "body.event_lookback"]);
    await admin.client.setLimits(ctx.id, { event_lookback: 60 });
    expect(await admin.client.sendEvent(ctx.id, { id: "first", name: "order.approved", key: "k" })).toMatchObject({
      matched: 0,
    });
    await admin.client.sendEvent(ctx.id, { id: "second", name: "order.approved", key: "k" });
    const view = await admin.client.submitFlow(ctx.id, { start: true, jobs: [waitJob("k")] });
    const done = await eventually(
      async () => {
        const now = await admin.client.loadFlow(ctx.id, view.id);
        return now.status === "finished" ? now : undefined;
      },
      10_000,
      50,
      "the wait to take the kept event",
    );
    expect(done.result.approval).toEqual({ event_id: "first" });
  });

  it("times out in error (here allowed), or skipped with on_timeout: skip, on the flow's alarm", async () => {
    const { admin, ctx } = await setup();
    const view = await admin.client.submitFlow(ctx.id, {
      start: true,
      jobs: [
        { name: "late", wait: { event: "never", timeout: 1 }, allow_failure: true },
        { name: "optional", wait: { event: "never", timeout: 1, on_timeout: "skip" } },
        { name: "after", depends: ["optional"], wait: { event: "never", timeout: 1 } },
      ],
    });
    await waitUntilPast(Date.now() + 1_000);
    const { stub, scope } = w.flowStub(ctx.id, view.id);
    await ringAlarm(stub);
    const done = await eventually(
      async () => {
        await stub.tick(scope);
        const now = await admin.client.loadFlow(ctx.id, view.id);
        return now.ended_at !== undefined ? now : undefined;
      },
      10_000,
      100,
      "the waits to time out",
    );
    expect(jobOf(done, "late")).toMatchObject({
      status: "error",
      error: 'timed out: no event never with key "" came within 1 s',
    });
    expect(jobOf(done, "optional")).toMatchObject({ status: "skipped" });
    expect(jobOf(done, "after")).toMatchObject({ status: "skipped", skip_reason: expect.stringContaining("optional") });
    // A failure allowed and two skips: nothing that matters failed.
    expect(done).toMatchObject({
      status: "finished",
      skipped: { optional: expect.any(String), after: expect.any(String) },
    });
    // The result mail says which were skipped and why, in its text and its flow_result.
    const inbox = (await admin.client.request("GET", `/v1/contexts/${ctx.id}/inbox?max=10`)) as {
      messages: { message: string; flow_result?: { flow_id: number; skipped?: Record<string, string> } }[];
    };
    const mail = inbox.messages.find((m) => m.flow_result?.flow_id === view.id);
    expect(mail?.flow_result?.skipped).toEqual(done.skipped);
    expect(mail?.message).toContain(`skipped: optional: ${done.skipped?.optional}`);
    expect(mail?.message).toContain(`skipped: after: ${done.skipped?.after}`);
  });
});

describe("a sleep", () => {
  it("ends on the flow's alarm, after its object lost its memory and its journal", async () => {
    const { admin, ctx } = await setup();
    const view = await admin.client.submitFlow(ctx.id, {
      start: true,
      jobs: [{ name: "nap", sleep: 2 }],
    });
    const nap = jobOf(view, "nap");
    expect(nap).toMatchObject({ kind: "sleep", status: "started", waiting: { reason: "sleep" } });
    const { stub, scope } = w.flowStub(ctx.id, view.id);
    // Memory and the journal gone: rebuilt from Redis, the sleep starts when the flow did.
    await runInDurableObject(stub, async (instance, state) => {
      const keys = [...(await state.storage.list({ prefix: "journal:" })).keys()];
      await state.storage.delete(keys);
      (instance as unknown as { flow: { forget(): void } }).flow.forget();
    });
    const rebuilt = await admin.client.loadFlow(ctx.id, view.id);
    expect(jobOf(rebuilt, "nap")).toMatchObject({ status: "started" });
    expect(Math.abs((jobOf(rebuilt, "nap")?.sleep_until ?? 0) - (nap?.sleep_until ?? 0))).toBeLessThanOrEqual(1);
    await waitUntilPast(((nap?.sleep_until ?? 0) + 1) * 1000);
    const done = await eventually(
      async () => {
        await stub.tick(scope);
        const now = await admin.client.loadFlow(ctx.id, view.id);
        return now.status === "finished" ? now : undefined;
      },
      10_000,
      100,
      "the sleep to end",
    );
    expect(done.result.nap?.slept_until).toMatch(/^\d{4}-\d\d-\d\dT/);
  });

  it("past the flow's deadline is refused at submission", async () => {
    const { admin, ctx } = await setup();
    const refused = await failure(
      admin.client.submitFlow(ctx.id, { timeouts: { flow: 60 }, jobs: [{ name: "nap", sleep: 3600 }] }),
    );
    expect(refused.status).toBe(400);
    expect(JSON.stringify(refused.problem)).toContain("body.jobs.0.sleep");
    // A time past it, and sleeps that add up past it (the second starts after the first).
    const until = new Date(Date.now() + 120_000).toISOString();
    const late = await failure(
      admin.client.submitFlow(ctx.id, { timeouts: { flow: 60 }, jobs: [{ name: "nap", sleep_until: until }] }),
    );
    expect([late.status, late.problem.field]).toEqual([400, "body.jobs.0.sleep_until"]);
    const chained = await failure(
      admin.client.submitFlow(ctx.id, {
        timeouts: { flow: 60 },
        jobs: [
          { name: "first", sleep: 40 },
          { name: "second", sleep: 30, depends: ["first"] },
        ],
      }),
    );
    expect([chained.status, chained.problem.field]).toEqual([400, "body.jobs.1.sleep"]);
    expect(chained.problem.detail).toContain("starts no sooner than 40 s after the flow's start");
    const both = await failure(
      admin.client.submitFlow(ctx.id, { jobs: [{ name: "x", sleep: 1, script: "true", script_type: "sh" }] }),
    );
    expect(both.status).toBe(400);
    const lone = await failure(
      admin.client.request("POST", `/v1/contexts/${ctx.id}/jobs`, { job: { name: "nap", sleep: 5 } }),
    );
    expect(lone.status).toBe(400);
    expect(JSON.stringify(lone.problem)).toContain("job.sleep");
    const badWhen = await failure(
      admin.client.submitFlow(ctx.id, {
        jobs: [{ name: "x", script: "true", script_type: "sh", when: "deps.a.b ==" }],
      }),
    );
    expect(JSON.stringify(badWhen.problem)).toContain("body.jobs.0.when");
  });
});
