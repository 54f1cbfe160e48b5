import { runInDurableObject } from "cloudflare:test";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { schedulerName } from "../../functions/core/stubs.js";
import type { Scheduler } from "../../functions/schedule/scheduler.js";
import type { Memory } from "../../functions/schedule/memory.js";
import type { CoordinatorClient, ScheduleCreationInput } from "../../shared/client/index.js";
import { failure, testWorker } from "./harness.js";

// Recurring flows inside workerd against the real Redis: the API's validation (RFC 9457 problems
// naming the field), the records and the due set, pause / resume / trigger / delete, the
// creator's permission checked at fire time, and a fire acted on twice (at once, and again after
// the object lost what it remembered) starting one flow.

const w = testWorker("schedules");
afterAll(() => w.cleanup());

let admin: Awaited<ReturnType<typeof w.newActor>>;
let client: CoordinatorClient;
let ctx: number;

beforeAll(async () => {
  admin = await w.newActor();
  client = admin.client;
  ctx = (await client.createContext()).id;
});

const template = { jobs: [{ name: "hello", script: "echo hello", script_type: "sh" as const }] };
/** An hourly schedule: nothing fires by itself while a test runs. */
const hourly = (extra: Partial<ScheduleCreationInput> = {}): ScheduleCreationInput => ({
  template,
  interval_seconds: 3600,
  ...extra,
});

/** A schedule's Scheduler object, typed with its class for runInDurableObject. */
function schedulerOf(contextId: number, scheduleId: number): DurableObjectStub<Scheduler> {
  const id = w.env.SCHEDULER.idFromName(schedulerName({ prefix: w.prefix, contextId, scheduleId }));
  return w.env.SCHEDULER.get(id) as unknown as DurableObjectStub<Scheduler>;
}

describe("a trigger retried", () => {
  it("acts on the manual fire still pending from a trigger that was answered 503, not on a second one", async () => {
    const s = await client.schedules.create(ctx, hourly({ overlap: "allow_all" }));
    // As a trigger leaves it when acting failed (storage away): its manual fire pending, a second ago.
    const at = (Math.floor(Date.now() / 1000) - 1) * 1000;
    await runInDurableObject(schedulerOf(ctx, s.id), async (instance, state) => {
      const memory = (await state.storage.get<Memory>("state")) as Memory;
      await state.storage.put("state", { ...memory, pending: [{ at, trigger: "manual" }] });
      (instance as unknown as { cached: Memory | undefined }).cached = undefined; // read from storage again
    });
    const run = await client.schedules.trigger(ctx, s.id);
    expect(run.fire_at).toBe(at / 1000);
    const again = await client.schedules.trigger(ctx, s.id);
    expect(again.flow_id).not.toBe(run.flow_id); // a new trigger, once nothing is pending, is a new fire
    const view = await client.schedules.get(ctx, s.id);
    expect(view.recent_runs.filter((r) => r.fire_at === at / 1000)).toHaveLength(1);
    await client.schedules.delete(ctx, s.id);
  });
});

describe("creating a schedule", () => {
  it("creates one schedule for a create retried under the same Idempotency-Key", async () => {
    const first = await client.schedules.create(ctx, hourly(), { idempotencyKey: "nightly-1" });
    const again = await client.schedules.create(ctx, hourly(), { idempotencyKey: "nightly-1" });
    expect(again.id).toBe(first.id);
    const other = await client.schedules.create(ctx, hourly(), { idempotencyKey: "nightly-2" });
    expect(other.id).not.toBe(first.id);
    // The key with another request is refused, naming the header.
    const reused = await failure(
      client.schedules.create(ctx, hourly({ interval_seconds: 60 }), { idempotencyKey: "nightly-1" }),
    );
    expect([reused.status, reused.code, reused.problem.field]).toEqual([
      422,
      "idempotency-key-reused",
      "header.idempotency-key",
    ]);
    const ids = (await client.schedules.list(ctx, { limit: 500 })).items.map((s) => s.id);
    expect(ids.filter((id) => id === first.id)).toHaveLength(1);
    for (const id of [first.id, other.id]) await client.schedules.delete(ctx, id);
  });

  it("refuses what is invalid with a 400 naming the field", async () => {
    const refused = async (input: unknown) =>
      (await failure(client.schedules.create(ctx, input as ScheduleCreationInput))).problem;
    const bad = await refused({ template, cron: "61 * * * *" });
    expect(bad.status).toBe(400);
    expect(bad.field).toBe("body.cron");
    expect(bad.detail).toContain("minute");
    expect((await refused({ template, cron: "* * * *" })).field).toBe("body.cron");
    expect((await refused({ template, cron: "* * * * * * *" })).field).toBe("body.cron");
    expect((await refused({ template, cron: "* * * * *", interval_seconds: 5 })).field).toBe("body.cron");
    expect((await refused({ template })).field).toBe("body.cron");
    expect((await refused({ template, cron: "* * * * *", timezone: "Mars/Olympus" })).field).toBe("body.timezone");
    expect((await refused({ template, interval_seconds: 5, timezone: "UTC" })).field).toBe("body.timezone");
    expect((await refused({ template, interval_seconds: 0 })).field).toBe("body.interval_seconds");
    expect((await refused({ template, interval_seconds: 5, overlap: "queue" })).field).toBe("body.overlap");
    expect((await refused({ template, interval_seconds: 5, catchup: { policy: "run", max: 0 } })).field).toBe(
      "body.catchup.max",
    );
    expect((await refused({ template: { ...template, start: true }, interval_seconds: 5 })).field).toBe(
      "body.template",
    );
    const cycle = {
      jobs: [
        { name: "a", script: "true", script_type: "sh", depends: ["b"] },
        { name: "b", script: "true", script_type: "sh", depends: ["a"] },
      ],
    };
    expect((await refused({ template: cycle, interval_seconds: 5 })).field).toBe("body.template.jobs.0.depends");
    const pinned = { jobs: [{ ...template.jobs[0], runner_id: 99_999 }] };
    expect((await refused({ template: pinned, interval_seconds: 5 })).field).toBe("body.template.jobs.0.runner_id");
    expect((await client.schedules.list(ctx)).total).toBe(0);
  });

  it("is for admins; readers list and read", async () => {
    const reader = await w.newActor();
    await client.grant(ctx, "readers", reader.actor.id);
    const refused = await failure(reader.client.schedules.create(ctx, hourly()));
    expect(refused.status).toBe(403);
    const schedule = await client.schedules.create(ctx, hourly({ note: "for readers" }));
    expect((await reader.client.schedules.get(ctx, schedule.id)).note).toBe("for readers");
    expect((await reader.client.schedules.list(ctx)).items.map((s) => s.id)).toContain(schedule.id);
    expect((await failure(reader.client.schedules.trigger(ctx, schedule.id))).status).toBe(403);
    expect((await failure(reader.client.schedules.get(ctx, 999_999))).status).toBe(404);
    await client.schedules.delete(ctx, schedule.id);
  });

  it("stores the record, its next fire (from the anchor) and its place in the due set", async () => {
    const view = await client.schedules.create(ctx, hourly());
    expect(view.status).toBe("active");
    expect(view.next_fire_at).toBe(view.anchor_ms / 1000 + 3600);
    expect(view.recent_runs).toEqual([]);
    const cron = await client.schedules.create(ctx, { template, cron: "0 30 2 * * *", timezone: "Europe/Berlin" });
    expect(cron.timezone).toBe("Europe/Berlin");
    expect(cron.overlap).toBe("skip");
    expect(cron.catchup).toEqual({ policy: "skip", max: 10 });
    const score = await w.redis.exec<string | null>(["ZSCORE", w.keys.scheduleDue(), `${ctx}:${view.id}`]);
    expect(Number(score)).toBe(((view.next_fire_at as number) * 1000) as number);
    const listed = await client.schedules.list(ctx);
    expect(listed.items.find((s) => s.id === cron.id)?.next_fire_at).toBe(cron.next_fire_at);
    // The coming fires, the next one first, as the spec gives them: an hour apart, 02:30 in Berlin each day.
    const first = view.next_fire_at as number;
    expect(view.upcoming_fires).toEqual([0, 1, 2, 3, 4].map((k) => first + k * 3600));
    const berlin = new Intl.DateTimeFormat("en-GB", { timeZone: "Europe/Berlin", timeStyle: "short" });
    expect(cron.upcoming_fires).toHaveLength(5);
    expect(cron.upcoming_fires[0]).toBe(cron.next_fire_at);
    expect(cron.upcoming_fires.map((t) => berlin.format(t * 1000))).toEqual(Array(5).fill("02:30"));
    // JSON-RPC over the same service functions.
    expect((await client.rpc<{ id: number }>("schedule.get", { context_id: ctx, id: cron.id })).id).toBe(cron.id);
    const bad = await failure(client.rpc("schedule.create", { context_id: ctx, template, cron: "nope" }));
    expect([bad.rpcCode, bad.problem.field]).toEqual([-32602, "params.cron"]);
  });
});

describe("running a schedule", () => {
  it("pauses, resumes, triggers and deletes, each idempotent", async () => {
    const s = await client.schedules.create(ctx, hourly());
    const paused = await client.schedules.pause(ctx, s.id);
    expect([paused.status, paused.next_fire_at, paused.upcoming_fires]).toEqual(["paused", undefined, []]);
    expect((await client.schedules.pause(ctx, s.id)).status).toBe("paused");
    expect(await w.redis.exec(["ZSCORE", w.keys.scheduleDue(), `${ctx}:${s.id}`])).toBeNull();
    expect(await runInDurableObject(schedulerOf(ctx, s.id), (_i, state) => state.storage.getAlarm())).toBeNull();

    // A paused schedule can still be fired by hand.
    const run = await client.schedules.trigger(ctx, s.id);
    expect([run.outcome, run.trigger]).toEqual(["started", "manual"]);
    const flow = await client.loadFlow(ctx, run.flow_id as number);
    expect(flow.jobs.map((j) => j.key)).toEqual(["hello"]);
    expect(flow.status).not.toBe("dispatched");

    const resumed = await client.schedules.resume(ctx, s.id);
    expect(resumed.status).toBe("active");
    expect(resumed.next_fire_at).toBeGreaterThan(Date.now() / 1000);
    expect(resumed.recent_runs[0]?.flow_id).toBe(run.flow_id);
    expect(resumed.running_flow_ids).toEqual([run.flow_id]);
    const alarm = await runInDurableObject(schedulerOf(ctx, s.id), (_i, state) => state.storage.getAlarm());
    expect(alarm).toBe((resumed.next_fire_at as number) * 1000);

    await client.schedules.delete(ctx, s.id);
    await client.schedules.delete(ctx, s.id);
    expect((await failure(client.schedules.get(ctx, s.id))).status).toBe(404);
    expect((await failure(client.schedules.trigger(ctx, s.id))).status).toBe(404);
    expect(await w.redis.exec(["ZSCORE", w.keys.scheduleDue(), `${ctx}:${s.id}`])).toBeNull();
    const left = await runInDurableObject(schedulerOf(ctx, s.id), async (_i, state) => ({
      alarm: await state.storage.getAlarm(),
      keys: [...(await state.storage.list()).keys()],
    }));
    expect(left).toEqual({ alarm: null, keys: [] });
    // The flow it started is left alone.
    expect((await client.loadFlow(ctx, run.flow_id as number)).id).toBe(run.flow_id);
  });

  it("shows only the flows still running, paused or not, and no fire for a resume", async () => {
    const s = await client.schedules.create(ctx, hourly());
    await client.schedules.pause(ctx, s.id);
    await new Promise((r) => setTimeout(r, 1_100)); // a resume in another second than the creation
    const resumed = await client.schedules.resume(ctx, s.id);
    // Nothing fired: the resume moves where planning starts, not the last fire.
    expect(resumed.last_fire_at).toBeUndefined();
    await client.schedules.pause(ctx, s.id);
    const run = await client.schedules.trigger(ctx, s.id);
    expect((await client.schedules.get(ctx, s.id)).running_flow_ids).toEqual([run.flow_id]);
    await client.cancelFlow(ctx, run.flow_id as number);
    // Paused, the schedule fires no more; its view still forgets the flow that ended.
    const view = await client.schedules.get(ctx, s.id);
    expect([view.running_flow_ids, view.last_fire_at]).toEqual([[], run.fire_at]);
    await client.schedules.delete(ctx, s.id);
  });

  it("starts one flow for a fire acted on twice at once, and again after the object forgot it", async () => {
    const own = (await client.createContext()).id;
    const s = await client.schedules.create(own, hourly({ overlap: "allow_all" }));
    const stub = schedulerOf(own, s.id);
    const fireAt = s.anchor_ms + 3600_000 - 7200_000; // a fire time of its own (the key is schedule + time)
    const owe = () =>
      runInDurableObject(stub, async (instance, state) => {
        const memory = (await state.storage.get<Memory>("state")) as Memory;
        await state.storage.put("state", { ...memory, pending: [{ at: fireAt, trigger: "schedule" }], runs: [] });
        // The instance's memory of it goes too, as when the isolate is lost.
        (instance as unknown as { cached: undefined }).cached = undefined;
      });
    await owe();
    // The alarm and the sweep's poke at once.
    await Promise.all([
      runInDurableObject(stub, (instance) => instance.alarm()),
      stub.poke({ prefix: w.prefix, contextId: own, scheduleId: s.id, origin: "http://coordinator.test" }),
    ]);
    const first = await client.schedules.get(own, s.id);
    const started = first.recent_runs.filter((r) => r.fire_at * 1000 === fireAt);
    expect(started).toHaveLength(1);
    expect(started[0]?.outcome).toBe("started");
    // The flow was created, then the object lost its record of the fire: acting again finds the same flow.
    await owe();
    await runInDurableObject(stub, (instance) => instance.alarm());
    const again = await client.schedules.get(own, s.id);
    expect(again.recent_runs.find((r) => r.fire_at * 1000 === fireAt)?.flow_id).toBe(started[0]?.flow_id);
    expect((await client.listFlows(own)).total).toBe(1);
  });

  it("fails the fire and pauses the schedule, saying why, once its creator is no longer an admin", async () => {
    const own = (await client.createContext()).id;
    const other = await w.newActor();
    await client.grant(own, "admins", other.actor.id);
    const s = await client.schedules.create(own, hourly());
    await other.client.revoke(own, "admins", admin.actor.id);
    const run = await other.client.schedules.trigger(own, s.id);
    expect(run.outcome).toBe("failed");
    expect(run.reason).toContain(`actor ${admin.actor.id}`);
    const view = await other.client.schedules.get(own, s.id);
    expect(view.status).toBe("paused");
    expect(view.paused_reason).toContain("may no longer start flows");
    expect(view.next_fire_at).toBeUndefined();
    expect((await other.client.listFlows(own)).total).toBe(0);
  });
});
