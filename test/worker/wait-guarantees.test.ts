import { runInDurableObject } from "cloudflare:test";
import { afterAll, describe, expect, it } from "vitest";
import type { FlowStreamEvent, FlowView } from "../../shared/model/index.js";
import { eventually } from "../support/eventually.js";
import { ringAlarm, takeAlarm, testWorker, waitUntilPast } from "./harness.js";
import { jobName, PullRunner } from "./pull-runner.js";

// What issue 32 promises of jobs that take no runner, through the real Worker in workerd over
// Redis: whatever races or repeats (two events at once, an event and a cancel, an event and the
// timeout, a sleep's alarm ringing twice), each ends exactly once; a re-run gets its own
// deadline; a dependent of a job allowed to fail reads how it ended, DEP_<JOB>_STATUS.

const w = testWorker("wait-guarantees");
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

/** The flow's event stream as its object journalled it. */
function streamOf(contextId: number, flowId: number): Promise<FlowStreamEvent[]> {
  return runInDurableObject(w.flowStub(contextId, flowId).stub, (_instance, state) =>
    state.storage.sql
      .exec<{ body: string }>("SELECT body FROM stream ORDER BY seq")
      .toArray()
      .map((row) => JSON.parse(row.body) as FlowStreamEvent),
  );
}

/** The stream's ends (job.finished, job.error, job.skipped) of one job. */
const endsOf = (stream: FlowStreamEvent[], jobId: number) =>
  stream.filter((e) => e.job_id === jobId && ["job.finished", "job.error", "job.skipped"].includes(e.type));

const idOf = (view: FlowView, name: string) => view.jobs.find((j) => j.name === name)?.id as number;

async function ended(client: Awaited<ReturnType<typeof setup>>["admin"]["client"], ctx: number, flow: number) {
  return eventually(
    async () => {
      const now = await client.loadFlow(ctx, flow);
      return now.ended_at !== undefined ? now : undefined;
    },
    10_000,
    50,
    `flow ${flow} to end`,
  );
}

describe("a wait's races", () => {
  it("ends once when two events for it (other ids) come at once: one resumes it, the other only matches", async () => {
    const { admin, ctx } = await setup();
    for (let i = 0; i < 4; i++) {
      const view = await admin.client.submitFlow(ctx.id, { start: true, jobs: [waitJob(`twice-${i}`)] });
      const sends = await Promise.all(
        ["a", "b"].map((by) =>
          admin.client.sendEvent(ctx.id, {
            id: `e-${i}-${by}`,
            name: "order.approved",
            key: `twice-${i}`,
            data: { by },
          }),
        ),
      );
      expect(sends.map((s) => s.resumed).sort()).toEqual([0, 1]);
      const winner = sends.find((s) => s.resumed === 1);
      const done = await admin.client.loadFlow(ctx.id, view.id);
      expect(done).toMatchObject({ status: "finished", result: { approval: { event_id: winner?.id } } });
      expect(endsOf(await streamOf(ctx.id, view.id), idOf(view, "approval"))).toHaveLength(1);
    }
  });

  it("ends once when an event and a cancel come together: one of them wins, the other changes nothing", async () => {
    const { admin, ctx } = await setup();
    for (let i = 0; i < 4; i++) {
      const view = await admin.client.submitFlow(ctx.id, { start: true, jobs: [waitJob(`race-${i}`)] });
      const [sent, cancelled] = await Promise.all([
        admin.client.sendEvent(ctx.id, { name: "order.approved", key: `race-${i}` }),
        admin.client.cancelFlow(ctx.id, view.id, "race").then(
          () => true,
          () => false,
        ),
      ]);
      expect(sent.resumed + (cancelled ? 1 : 0)).toBe(1);
      const done = await admin.client.loadFlow(ctx.id, view.id);
      expect(done.status).toBe(sent.resumed === 1 ? "finished" : "error");
      expect(endsOf(await streamOf(ctx.id, view.id), idOf(view, "approval"))).toHaveLength(1);
    }
  });

  it("ends once when an event races its timeout", async () => {
    const { admin, ctx } = await setup();
    const view = await admin.client.submitFlow(ctx.id, {
      start: true,
      jobs: [{ name: "approval", wait: { event: "order.approved", key: "t", timeout: 1 } }],
    });
    await waitUntilPast(Date.now() + 1_000);
    const { stub } = w.flowStub(ctx.id, view.id);
    const [sent] = await Promise.all([
      admin.client.sendEvent(ctx.id, { name: "order.approved", key: "t" }),
      ringAlarm(stub),
    ]);
    const done = await ended(admin.client, ctx.id, view.id);
    expect(done.status).toBe(sent.resumed === 1 ? "finished" : "error");
    expect(sent.matched).toBeLessThanOrEqual(1);
    expect(endsOf(await streamOf(ctx.id, view.id), idOf(view, "approval"))).toHaveLength(1);
  });
});

describe("a wait whose start raced an event the context kept", () => {
  it("takes the kept event at its next wake, before its timeout is acted on, though its object lost its memory", async () => {
    // The event is taken (and kept) before the wait's index entry lands, and the object loses
    // its memory before it looked back: its next wake is the timeout's alarm, which must look
    // back for kept events before it times the wait out. The entry is removed by hand to put
    // the send before it, as a commit delayed by storage would.
    const { admin, ctx } = await setup();
    await admin.client.setLimits(ctx.id, { event_lookback: 60 });
    const view = await admin.client.submitFlow(ctx.id, {
      start: true,
      jobs: [{ name: "approval", wait: { event: "order.approved", key: "late", timeout: 1 } }],
    });
    const { stub } = w.flowStub(ctx.id, view.id);
    await eventually(
      async () => (await admin.client.loadFlow(ctx.id, view.id)).jobs[0]?.status === "started" || undefined,
      5_000,
      20,
      "the wait's start",
    );
    await w.redis.exec(["DEL", w.keys.waits(ctx.id, "order.approved", "late")]);
    const sent = await admin.client.sendEvent(ctx.id, {
      id: "e-late",
      name: "order.approved",
      key: "late",
      data: { ok: "1" },
    });
    expect(sent).toMatchObject({ matched: 0, resumed: 0 });
    await runInDurableObject(stub, (instance) => (instance as unknown as { flow: { forget(): void } }).flow.forget());
    await waitUntilPast(Date.now() + 1_000);
    await ringAlarm(stub);
    const done = await ended(admin.client, ctx.id, view.id);
    expect(done.status).toBe("finished");
    expect(done.jobs[0]?.result).toMatchObject({ ok: "1", event_id: "e-late" });
    expect(endsOf(await streamOf(ctx.id, view.id), idOf(view, "approval"))).toHaveLength(1);
  });
});

describe("a sleep's alarm", () => {
  it("ringing twice (at once, and again after) ends the sleep once, and starts what follows once", async () => {
    const { admin, ctx } = await setup();
    const view = await admin.client.submitFlow(ctx.id, {
      start: true,
      jobs: [
        { name: "nap", sleep: 1 },
        { name: "after", depends: ["nap"], wait: { event: "never", timeout: 60 } },
      ],
    });
    const { stub } = w.flowStub(ctx.id, view.id);
    await takeAlarm(stub); // from here on, only this test rings it
    await waitUntilPast(((view.jobs.find((j) => j.name === "nap")?.sleep_until ?? 0) + 1) * 1000);
    await Promise.all([ringAlarm(stub), ringAlarm(stub)]);
    await ringAlarm(stub);
    const now = await admin.client.loadFlow(ctx.id, view.id);
    expect(now.jobs.map((j) => [j.name, j.status, j.attempt])).toEqual([
      ["nap", "finished", 1],
      ["after", "started", 1],
    ]);
    const stream = await streamOf(ctx.id, view.id);
    expect(endsOf(stream, idOf(view, "nap")).map((e) => e.type)).toEqual(["job.finished"]);
    expect(stream.filter((e) => e.type === "job.wait_started")).toHaveLength(1);
  });
});

describe("a re-run of a flow that failed on its deadline (timeouts.flow)", () => {
  it("runs after the deadline passed, its own deadline counted from the re-run, through an eviction", async () => {
    const { admin, ctx } = await setup();
    const view = await admin.client.submitFlow(ctx.id, { start: true, timeouts: { flow: 2 }, jobs: [waitJob("late")] });
    const { stub } = w.flowStub(ctx.id, view.id);
    await waitUntilPast(Date.now() + 2_000);
    await ringAlarm(stub);
    const failed = await ended(admin.client, ctx.id, view.id);
    expect(failed).toMatchObject({
      status: "error",
      error: { reason: "the flow ran past its deadline of 2 s (timeouts.flow)" },
    });

    const before = Math.floor(Date.now() / 1000);
    const again = await admin.client.rerunFlow(ctx.id, view.id);
    expect(again).toMatchObject({ status: "started", run: 2 });
    expect(again.next_deadline).toBeGreaterThanOrEqual(before + 2);
    const record = await w.redis.exec<string | null>(["HGET", w.keys.flow(ctx.id, view.id), "run_started_at"]);
    expect(Number(record)).toBeGreaterThanOrEqual(before);
    // Its memory gone (rebuilt from Redis), the object keeps the re-run's deadline: its alarm,
    // rung now, fails nothing.
    await runInDurableObject(stub, (instance) => (instance as unknown as { flow: { forget(): void } }).flow.forget());
    await ringAlarm(stub);
    expect(await admin.client.loadFlow(ctx.id, view.id)).toMatchObject({ status: "started", run: 2 });
    const sent = await admin.client.sendEvent(ctx.id, { name: "order.approved", key: "late" });
    expect(sent).toMatchObject({ matched: 1, resumed: 1 });
    expect(await ended(admin.client, ctx.id, view.id)).toMatchObject({ status: "finished", run: 2 });
  });
});

describe("a dependent of a job allowed to fail", () => {
  it("runs by its needs and reads how its dependencies ended as DEP_<JOB>_STATUS, on the runner", async () => {
    const { admin, ctx } = await setup();
    const runner = await PullRunner.register(w, admin.client, ctx.id);
    const sh = (name: string, more: Record<string, unknown> = {}) => ({
      name,
      script: `echo ${name}`,
      script_type: "sh" as const,
      ...more,
    });
    const view = await admin.client.submitFlow(ctx.id, {
      start: true,
      jobs: [
        sh("lint", { allow_failure: true }),
        { name: "gate", wait: { event: "never", timeout: 1, on_timeout: "skip" } },
        sh("report", { depends: ["lint", "gate"], needs: "all_done" }),
      ],
    });
    const [lint] = await runner.leaseSome();
    expect(lint && jobName(lint)).toBe("lint");
    await runner.fail(lint as NonNullable<typeof lint>, "style");
    await waitUntilPast(Date.now() + 1_000);
    await ringAlarm(w.flowStub(ctx.id, view.id).stub);
    const [report] = await runner.leaseSome();
    expect(report && jobName(report)).toBe("report");
    expect(report?.message.job[0]?.env_vars).toMatchObject({ DEP_LINT_STATUS: "error", DEP_GATE_STATUS: "skipped" });
    await runner.finish(report as NonNullable<typeof report>);
    expect(await ended(admin.client, ctx.id, view.id)).toMatchObject({
      status: "finished",
      skipped: { gate: expect.stringContaining("timed out") },
    });
  });
});
