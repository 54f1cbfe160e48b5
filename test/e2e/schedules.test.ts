import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import type { ScheduleCreationInput } from "../../shared/client/index.js";
import type { ScheduleRun, ScheduleView } from "../../shared/model/index.js";
import { eventually } from "../support/eventually.js";
import { expectOneErrorLine, newUser, register } from "../support/flowc.js";
import { flowEnd } from "../support/flow-runs.js";
import { commandDelta } from "../support/private-stack.js";
import { usePrivateStack } from "../support/use-private-stack.js";

// Recurring flows with real processes (docs/schedules.md): a private stack (wrangler dev, Redis,
// cron sweeps every minute) and the reference runner running real sh jobs. Every-second
// schedules fire flows that run to their end; the overlap policies against a job that runs
// for seconds; catch-up after the Worker was stopped; pause, resume, trigger and delete; and
// fires repeated by the sweep racing the alarm starting one flow each. No timing is asserted:
// orderings and counts only, with generous waits.

const { stack, admin } = usePrivateStack("schedules");

const quick = { jobs: [{ name: "hello", script: "echo hello", script_type: "sh" as const }] };
const slow = { jobs: [{ name: "slow", script: "sleep 4; echo done", script_type: "sh" as const }] };
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** A context of the test's own with a reference runner (push, concurrency 4) started in it. */
async function contextWithRunner(): Promise<number> {
  const ctx = (await admin().client.createContext()).id;
  const runner = await stack().registerReferenceRunner(admin().client, ctx, "push");
  await runner.start();
  return ctx;
}

const view = (ctx: number, id: number) => admin().client.schedules.get(ctx, id);

/** Waits (60 s at most) until the schedule's view satisfies `check`; `what` names it in a failure. */
function untilView(ctx: number, id: number, check: (v: ScheduleView) => boolean, what: string): Promise<ScheduleView> {
  return eventually(
    async () => {
      const v = await view(ctx, id);
      return check(v) ? v : undefined;
    },
    60_000,
    200,
    what,
  );
}

const started = (runs: ScheduleRun[]) => runs.filter((r) => r.outcome === "started" || r.outcome === "cancelled_other");

/**
 * Waits, if need be, until the next `spanS` seconds fall between two of the stack's minutely cron
 * sweeps (fired at second 0), so counting Redis commands does not count a sweep too.
 */
async function awayFromSweeps(spanS: number): Promise<void> {
  const second = new Date().getUTCSeconds();
  if (second >= 3 && second + spanS <= 57) return;
  await sleep((((63 - second) % 60) + 1) * 1000);
}

/** Triggers a schedule in a second of its own (two triggers in one second are one fire). */
async function triggerAlone(ctx: number, id: number): Promise<ScheduleRun> {
  await sleep(1000 - (Date.now() % 1000) + 20);
  return admin().client.schedules.trigger(ctx, id);
}

describe("firing", () => {
  it("fires an every-second cron schedule on whole seconds, and each flow runs to its end", async () => {
    const ctx = await contextWithRunner();
    const s = await admin().client.schedules.create(ctx, { template: quick, cron: "* * * * * *" });
    const v = await untilView(ctx, s.id, (v) => started(v.recent_runs).length >= 3, "three started fires");
    await admin().client.schedules.pause(ctx, s.id);
    const runs = started((await view(ctx, s.id)).recent_runs).reverse();
    const fires = runs.map((r) => r.fire_at);
    expect([...new Set(fires)]).toEqual(fires); // one run per fire
    expect([...fires].sort((a, b) => a - b)).toEqual(fires); // in fire order
    expect(v.next_fire_at === undefined || Number.isInteger(v.next_fire_at)).toBe(true);
    for (const run of runs) expect((await flowEnd(admin().client, ctx, run.flow_id as number)).status).toBe("finished");
    expect((await admin().client.listFlows(ctx)).total).toBe(runs.length);
  });
});

describe("overlap with a flow that runs for seconds", () => {
  /** A schedule of the slow job that only fires when triggered (hourly), with `overlap`. */
  const hourly = (overlap: ScheduleCreationInput["overlap"]): ScheduleCreationInput => ({
    template: slow,
    interval_seconds: 3600,
    ...(overlap ? { overlap } : {}),
  });

  it("skip: a fire while the flow runs is skipped, naming the flow", async () => {
    const ctx = await contextWithRunner();
    const s = await admin().client.schedules.create(ctx, hourly("skip"));
    const first = await triggerAlone(ctx, s.id);
    expect(first.outcome).toBe("started");
    const second = await triggerAlone(ctx, s.id);
    expect(second.outcome).toBe("skipped");
    expect(second.reason).toContain(`flow ${first.flow_id}`);
    expect((await flowEnd(admin().client, ctx, first.flow_id as number)).status).toBe("finished");
    // Once it ended, the next fire starts again.
    expect((await triggerAlone(ctx, s.id)).outcome).toBe("started");
  });

  it("allow_all: both fires start and both flows run, at the same time", async () => {
    const ctx = await contextWithRunner();
    const s = await admin().client.schedules.create(ctx, hourly("allow_all"));
    const a = await triggerAlone(ctx, s.id);
    const b = await triggerAlone(ctx, s.id);
    expect([a.outcome, b.outcome]).toEqual(["started", "started"]);
    const [fa, fb] = await Promise.all([a, b].map((r) => flowEnd(admin().client, ctx, r.flow_id as number)));
    expect([fa?.status, fb?.status]).toEqual(["finished", "finished"]);
    // The second started before the first ended.
    expect(fb?.started_at as number).toBeLessThanOrEqual(fa?.ended_at as number);
  });

  it("buffer_one: one fire waits for the flow's end, a third is skipped", async () => {
    const ctx = await contextWithRunner();
    const s = await admin().client.schedules.create(ctx, hourly("buffer_one"));
    const a = await triggerAlone(ctx, s.id);
    const b = await triggerAlone(ctx, s.id);
    const c = await triggerAlone(ctx, s.id);
    expect([a.outcome, b.outcome, c.outcome]).toEqual(["started", "buffered", "skipped"]);
    expect((await view(ctx, s.id)).buffered_fire_at).toBe(b.fire_at);
    const fa = await flowEnd(admin().client, ctx, a.flow_id as number);
    const v = await untilView(
      ctx,
      s.id,
      (v) => v.recent_runs.some((r) => r.trigger === "buffered" && r.outcome === "started"),
      "the buffered fire started",
    );
    const late = v.recent_runs.find((r) => r.trigger === "buffered") as ScheduleRun;
    expect(late.fire_at).toBe(b.fire_at);
    expect(v.buffered_fire_at).toBeUndefined();
    const fb = await flowEnd(admin().client, ctx, late.flow_id as number);
    expect([fa.status, fb.status]).toEqual(["finished", "finished"]);
    expect(fb.started_at as number).toBeGreaterThanOrEqual(fa.ended_at as number);
    expect((await admin().client.listFlows(ctx)).total).toBe(2);
  });

  it("cancel_other: the running flow is cancelled, then the new one starts", async () => {
    const ctx = await contextWithRunner();
    const s = await admin().client.schedules.create(ctx, hourly("cancel_other"));
    const a = await triggerAlone(ctx, s.id);
    const b = await triggerAlone(ctx, s.id);
    expect([a.outcome, b.outcome]).toEqual(["started", "cancelled_other"]);
    expect(b.reason).toContain(`flow ${a.flow_id}`);
    const fa = await flowEnd(admin().client, ctx, a.flow_id as number);
    expect(fa.status).toBe("error");
    expect(fa.error?.reason).toContain(`schedule ${s.id}`);
    expect((await flowEnd(admin().client, ctx, b.flow_id as number)).status).toBe("finished");
  });

  it("skip on an every-second schedule: started runs never overlap", async () => {
    const ctx = await contextWithRunner();
    const s = await admin().client.schedules.create(ctx, {
      template: { jobs: [{ name: "two", script: "sleep 2", script_type: "sh" }] },
      cron: "* * * * * *",
    });
    const v = await untilView(
      ctx,
      s.id,
      (v) => started(v.recent_runs).length >= 2 && v.recent_runs.some((r) => r.outcome === "skipped"),
      "two started and a skipped fire",
    );
    await admin().client.schedules.delete(ctx, s.id);
    const ends = await Promise.all(
      started(v.recent_runs).map((r) => flowEnd(admin().client, ctx, r.flow_id as number)),
    );
    const spans = ends
      .map((f) => ({ from: f.started_at as number, to: f.ended_at as number }))
      .sort((x, y) => x.from - y.from);
    for (let i = 1; i < spans.length; i++) expect(spans[i]?.from).toBeGreaterThanOrEqual(spans[i - 1]?.to as number);
  });
});

describe("downtime, pause and repeats", () => {
  it("catches up after the Worker was stopped: the newest `max` missed fires run, the rest are skipped", async () => {
    const ctx = await contextWithRunner();
    const client = admin().client;
    const run = await client.schedules.create(ctx, {
      template: quick,
      interval_seconds: 1,
      overlap: "allow_all",
      catchup: { policy: "run", max: 2 },
    });
    const skip = await client.schedules.create(ctx, { template: quick, interval_seconds: 1, overlap: "allow_all" });
    await untilView(ctx, skip.id, (v) => started(v.recent_runs).length >= 1, "a first fire");
    // The Worker stops, and comes back while storage is away too: nothing can fire for seconds.
    await stack().stopRest();
    await stack().restartWorker();
    await sleep(4_000);
    await stack().restartRest();
    const caught = await untilView(
      ctx,
      run.id,
      (v) => v.recent_runs.filter((r) => r.trigger === "catchup" && r.outcome === "started").length >= 2,
      "the catch-up fires",
    );
    const catchups = caught.recent_runs.filter((r) => r.trigger === "catchup" && r.outcome === "started");
    expect(catchups).toHaveLength(2);
    const summary = caught.recent_runs.find((r) => r.trigger === "catchup" && r.outcome === "skipped");
    expect(summary?.reason).toMatch(/^\d+ missed fires? from .* skipped \(catch-up run, max 2\)$/);
    // The two that ran are the newest missed ones, right before the fire that was on time.
    const onTime = caught.recent_runs.find((r) => r.trigger === "schedule" && r.fire_at > (catchups[0]?.fire_at ?? 0));
    expect(catchups.map((r) => r.fire_at).sort()).toEqual([
      (onTime?.fire_at as number) - 2,
      (onTime?.fire_at as number) - 1,
    ]);
    const skipped = await untilView(
      ctx,
      skip.id,
      (v) => v.recent_runs.some((r) => r.trigger === "catchup"),
      "the skipped catch-up",
    );
    expect(skipped.recent_runs.filter((r) => r.trigger === "catchup" && r.outcome !== "skipped")).toEqual([]);
    expect(skipped.recent_runs.find((r) => r.trigger === "catchup")?.reason).toContain("(catch-up skip)");
    for (const s of [run, skip]) await client.schedules.delete(ctx, s.id);
    for (const r of catchups) expect((await flowEnd(client, ctx, r.flow_id as number)).status).toBe("finished");
  });

  it("pauses, resumes without catching up the pause, triggers by hand, and stops for good when deleted", async () => {
    const ctx = await contextWithRunner();
    const client = admin().client;
    const s = await client.schedules.create(ctx, { template: quick, interval_seconds: 1 });
    await untilView(ctx, s.id, (v) => started(v.recent_runs).length >= 2, "two fires");
    const paused = await client.schedules.pause(ctx, s.id);
    const flowsAtPause = (await client.listFlows(ctx)).total;
    await sleep(3_000);
    expect((await client.listFlows(ctx)).total).toBe(flowsAtPause);
    const manual = await client.schedules.trigger(ctx, s.id);
    expect([manual.trigger, manual.outcome]).toEqual(["manual", "started"]);
    const resumedAt = Math.floor(Date.now() / 1000);
    await client.schedules.resume(ctx, s.id);
    const after = await untilView(
      ctx,
      s.id,
      (v) => v.recent_runs.some((r) => r.trigger === "schedule" && r.fire_at > resumedAt),
      "a fire after the resume",
    );
    // Nothing of the paused seconds was fired or caught up.
    const inPause = after.recent_runs.filter(
      (r) => r.trigger !== "manual" && r.fire_at > (paused.last_fire_at as number) && r.fire_at <= resumedAt,
    );
    expect(inPause).toEqual([]);
    await client.schedules.delete(ctx, s.id);
    await client.schedules.delete(ctx, s.id);
    const flowsAtDelete = (await client.listFlows(ctx)).total;
    await sleep(3_000);
    expect((await client.listFlows(ctx)).total).toBe(flowsAtDelete);
    expect((await client.schedules.list(ctx)).total).toBe(0);
  });

  it("starts one flow per fire while sweeps poke the schedule as its alarm rings", async () => {
    const ctx = await contextWithRunner();
    const client = admin().client;
    const s = await client.schedules.create(ctx, { template: quick, cron: "* * * * * *", overlap: "allow_all" });
    const member = stack().keys.scheduleDueMember(ctx, s.id);
    // For 6 s: the schedule always looks a minute late to the sweep, which is fired five at a time.
    const until = Date.now() + 6_000;
    while (Date.now() < until) {
      await stack().redis.exec(["ZADD", stack().keys.scheduleDue(), String(Date.now() - 120_000), member]);
      await Promise.all(Array.from({ length: 5 }, () => stack().sweep()));
    }
    await client.schedules.pause(ctx, s.id);
    const runs = started((await view(ctx, s.id)).recent_runs);
    expect(runs.length).toBeGreaterThanOrEqual(3);
    const fires = runs.map((r) => r.fire_at);
    expect(new Set(fires).size).toBe(fires.length);
    const flows = runs.map((r) => r.flow_id);
    expect(new Set(flows).size).toBe(flows.length);
    expect((await client.listFlows(ctx)).total).toBe(flows.length);
    expect(stack().workerLog()).toContain("sweep: late schedules poked=");
  });

  it("costs about what a direct submission costs per fire (measured, commands counted inside scripts too)", async () => {
    const client = admin().client;
    const ctx = (await client.createContext()).id; // no runner: the flows wait, nothing else moves
    // The same flow submitted through the API, for comparison.
    await client.submitFlow(ctx, { ...quick, start: true }); // warm: every script loaded (EVAL) once
    await awayFromSweeps(5);
    const before = await stack().quietCommandStats();
    await client.submitFlow(ctx, { ...quick, start: true });
    const plain = commandDelta(before, await stack().quietCommandStats());
    // Fires of the schedule's own alarm, counted between two quiet moments.
    const s = await client.schedules.create(ctx, { template: quick, interval_seconds: 3, overlap: "allow_all" });
    await untilView(ctx, s.id, (v) => started(v.recent_runs).length >= 1, "a first fire");
    await awayFromSweeps(14);
    // The flows counted are those created between the two counts, read outside the window: not
    // by created_at, whose whole seconds put a fire just after the window's start before it (a
    // run seen as 49 commands a fire: three fires' commands over two runs).
    await stack().quietCommandStats();
    const flowsBefore = (await client.listFlows(ctx)).total;
    const from = await stack().quietCommandStats();
    await sleep(6_500);
    const to = await stack().quietCommandStats();
    const fires = (await client.listFlows(ctx)).total - flowsBefore;
    await client.schedules.delete(ctx, s.id);
    const fired = commandDelta(from, to);
    expect(fires).toBeGreaterThanOrEqual(1);
    const perFire = fired.total / fires;
    console.log(
      `${fires} alarm fires: ${perFire.toFixed(1)} Redis commands each ${JSON.stringify(fired.byCommand)}; the same flow through POST /flows (start: true, signed request included): ${plain.total} ${JSON.stringify(plain.byCommand)}`,
    );
    // The schedule adds its record read, the next/last fire written (a script: EVALSHA, EXISTS, HSET) and the
    // due set (ZADD), and the Idempotency-Key reservation; the signed request's own checks are not there.
    // Both counts vary by a few with what else lands in their windows (a dispatch round reading
    // the runner list, a reap, a key-epoch read): seen 32 to 35.5 per fire against 23 to 26.
    expect(perFire).toBeLessThanOrEqual(plain.total + 15);
  });
});

describe("flowc schedule", () => {
  const tmp = mkdtempSync(path.join(tmpdir(), "flowc-schedules-"));
  afterAll(() => rmSync(tmp, { recursive: true, force: true }));

  it("creates, lists, shows, triggers, pauses, resumes and deletes, with --json and --help", async () => {
    const user = newUser(tmp, "scheduler", { profileVar: true });
    await register(user, stack().url);
    const ctx = /^context (\d+) created/.exec((await user.run("context", "create")).stdout)?.[1] as string;
    const file = path.join(tmp, "hello.yaml");
    writeFileSync(file, "start: true\njobs:\n  - name: hello\n    script_type: sh\n    script: echo hi\n");
    const help = await user.run("schedule", "create", "--help");
    expect(help.code).toBe(0);
    expect(help.stdout).toContain("--cron");
    expect(help.stdout).toContain("buffer_one");

    const bad = await user.run("schedule", "create", ctx, file, "--cron", "61 * * * *");
    expectOneErrorLine(bad, 1, /--cron: not a valid cron expression/);
    expectOneErrorLine(await user.run("schedule", "create", ctx, file), 2, /either --cron or --every/);
    expectOneErrorLine(await user.run("schedule", "create", ctx, file, "--every", "soon"), 2, /--every must be/);

    const created = await user.run("schedule", "create", ctx, file, "--every", "1h", "--overlap", "allow_all");
    expect(created.code, created.stderr).toBe(0);
    const id = /^schedule (\d+) created in context \d+ \(every hour\); next fire /.exec(created.stdout)?.[1] as string;
    expect(id).toBeDefined();
    const cron = await user.run(
      "schedule",
      "create",
      ctx,
      file,
      "--cron",
      "0 9 * * MON-FRI",
      "--tz",
      "Europe/Berlin",
      "--json",
    );
    expect(JSON.parse(cron.stdout)).toMatchObject({
      cron: "0 9 * * MON-FRI",
      timezone: "Europe/Berlin",
      status: "active",
    });

    const listed = await user.run("schedule", "list", ctx);
    expect(listed.stdout).toMatch(new RegExp(`^${id}\\s+active\\s+every hour\\s+allow_all`, "m"));
    expect(listed.stdout).toContain('at 09:00 Europe/Berlin, Monday to Friday (cron "0 9 * * MON-FRI" Europe/Berlin)');

    const fired = await user.run("schedule", "trigger", ctx, id);
    expect(fired.code, fired.stderr).toBe(0);
    const flowId = /^schedule \d+: started flow (\d+)$/m.exec(fired.stdout)?.[1] as string;
    expect(flowId).toBeDefined();
    const shown = await user.run("schedule", "show", ctx, id, "--json");
    expect(JSON.parse(shown.stdout).recent_runs[0]).toMatchObject({ trigger: "manual", flow_id: Number(flowId) });
    expect((await user.run("schedule", "show", ctx, id)).stdout).toMatch(/manual\s+started\s+\d+/);

    expect((await user.run("schedule", "pause", ctx, id)).stdout).toBe(`schedule ${id} paused\n`);
    expect((await user.run("schedule", "resume", ctx, id)).stdout).toMatch(
      new RegExp(`^schedule ${id} active; next fire `),
    );
    expect((await user.run("schedule", "delete", ctx, id)).stdout).toBe(`schedule ${id} deleted\n`);
    expect((await user.run("schedule", "delete", ctx, id)).code).toBe(0);
    expectOneErrorLine(await user.run("schedule", "show", ctx, id), 1, /does not exist/);
  });
});
