import { describe, expect, it } from "vitest";
import { actorKeyId } from "../../shared/auth/index.js";
import { signerFromJwk } from "../../shared/client/index.js";
import type { FlowStreamEvent, FlowView } from "../../shared/model/index.js";
import { answersIn, attemptsOf, flowEnd, runsIn } from "../support/flow-runs.js";
import { parsed, readSse } from "../support/streams.js";
import { pauseClients } from "../support/stack-storage.js";
import { usePrivateStack } from "../support/use-private-stack.js";

// Waits and sleeps across the faults the coordinator is built for: redis-server frozen
// (SIGSTOP) over a sleep's end, then the Worker restarted (every Durable Object's memory gone,
// its storage kept). The sleep still ends once, at the time it had (its result says so),
// the script after it runs once, and a wait still takes the event sent after the restart. And a
// wait's timeout after an outage its flow's object noticed long before: moved by the outage's
// length, not by the time from the outage to the timeout.

const { stack, admin, slotsHeld } = usePrivateStack("faults-waits");

describe("waits and sleeps across a frozen Redis and a restarted Worker", () => {
  it("ends a sleep once, at its time, and resumes a wait by an event sent after the restart", async () => {
    const ctx = (await admin().client.createContext()).id;
    const runner = await stack().registerTestRunner(admin().client, ctx);
    const proc = await runner.start();
    const sleeping = await admin().client.submitFlow(ctx, {
      start: true,
      jobs: [
        { name: "nap", sleep: 3 },
        { name: "after", depends: ["nap"], script: "true", script_type: "sh" },
      ],
    });
    const waiting = await admin().client.submitFlow(ctx, {
      start: true,
      env_vars: { ORDER: "7" },
      jobs: [
        { name: "approval", wait: { event: "order.approved", key: "${ORDER}", timeout: 120 } },
        { name: "ship", depends: ["approval"], script: "true", script_type: "sh" },
      ],
    });
    const until = sleeping.jobs.find((j) => j.name === "nap")?.sleep_until ?? 0;

    // Redis frozen over the sleep's end (its alarm rings into an outage), then the Worker
    // restarted (its readiness needs storage, so once Redis is back): every object's memory gone.
    stack().pauseRedis();
    try {
      await new Promise((r) => setTimeout(r, 5_000));
    } finally {
      stack().continueRedis();
    }
    await stack().restartWorker();

    const sent = await admin().client.sendEvent(ctx, {
      id: "approve-7",
      name: "order.approved",
      key: "7",
      data: { by: "ops" },
    });
    expect(sent).toMatchObject({ matched: 1, resumed: 1 });

    const slept = await flowEnd(admin().client, ctx, sleeping.id, 60_000);
    expect(slept.status).toBe("finished");
    // Its end is the time it had from its start (the view shows it in whole seconds), not later.
    const ended = Date.parse(slept.result.nap?.slept_until ?? "");
    expect(ended - until * 1000).toBeGreaterThanOrEqual(0);
    expect(ended - until * 1000).toBeLessThan(1000);
    const approved = await flowEnd(admin().client, ctx, waiting.id, 60_000);
    expect(approved.status).toBe("finished");
    expect(approved.result.approval).toEqual({ by: "ops", event_id: "approve-7" });
    await answersIn(proc, /^answered result ship /, 1, 30_000);
    // The scripts after them ran once each; the wait and the sleep held no slot.
    expect(attemptsOf(runsIn(proc.output()), sleeping.id)).toEqual({ after: [1] });
    expect(attemptsOf(runsIn(proc.output()), waiting.id)).toEqual({ ship: [1] });
    expect(await slotsHeld(ctx, runner.id)).toBe(0);
    expect(stack().workerLog()).not.toMatch(/FlowCoordinator: |Internal error/);

    // The sleep's stream tells it started and finished once.
    const stream = await readSse(
      `${stack().url}/v1/contexts/${ctx}/flows/${sleeping.id}/events`,
      await signerFromJwk(admin().jwk, actorKeyId(admin().id)),
      (e) => e.some((x) => x.event === "flow.finished"),
    );
    const events = parsed<FlowStreamEvent>(stream.events).filter((e) => e.job_id === slept.jobs[0]?.id);
    expect(events.map((e) => e.type)).toEqual(["job.sleep_started", "job.finished"]);
  }, 120_000);
});

/**
 * How long after it was due each named wait of an ended flow timed out (skipped), as the flow's
 * stream tells: its start's `until_ms` and its end's `at_ms` (NaN when either is missing: no
 * bound holds for it).
 */
async function waitsLateness(ctx: number, flowId: number, names: string[]): Promise<number[]> {
  const view = await flowEnd(admin().client, ctx, flowId, 150_000);
  expect(view.status, JSON.stringify(view)).toBe("finished");
  const stream = await readSse(
    `${stack().url}/v1/contexts/${ctx}/flows/${flowId}/events`,
    await signerFromJwk(admin().jwk, actorKeyId(admin().id)),
    (e) => e.some((x) => x.event === "flow.finished"),
  );
  const events = parsed<FlowStreamEvent>(stream.events);
  return names.map((name) => {
    const job = view.jobs.find((j) => j.name === name);
    expect(job?.status).toBe("skipped");
    const own = events.filter((e) => e.job_id === job?.id);
    const due = own.find((e) => e.type === "job.wait_started")?.until_ms ?? Number.NaN;
    return (own.find((e) => e.type === "job.skipped")?.at_ms ?? Number.NaN) - due;
  });
}

/**
 * Redis holds writes (reads are answered, scripts wait) for `ms` from 2 s before the named wait
 * of `flow` is due: resolves when they are taken again, with how long they were held.
 */
async function holdWritesOver(flow: FlowView, name: string, ms: number): Promise<number> {
  const wait = flow.jobs.find((j) => j.name === name);
  const due = (wait?.started_at_ms ?? Number.NaN) + (wait?.wait?.timeout ?? Number.NaN) * 1000;
  expect(due).toBeGreaterThan(Date.now() + 2_000);
  await new Promise((r) => setTimeout(r, due - 2_000 - Date.now()));
  const heldAt = Date.now();
  await pauseClients(stack().redisUrl, ms, "WRITE");
  await new Promise((r) => setTimeout(r, ms));
  return Date.now() - heldAt;
}

describe("a wait's timeout across an outage its flow noticed long before the timeout", () => {
  it("moves the timeout by the outage, not by the time from the outage to the timeout", async () => {
    const ctx = (await admin().client.createContext()).id;
    const short = 6;
    const long = 45;
    const flow = await admin().client.submitFlow(ctx, {
      start: true,
      jobs: [
        { name: "soon", wait: { event: "never.sent", key: "a", timeout: short, on_timeout: "skip" } },
        { name: "later", wait: { event: "never.sent", key: "b", timeout: long, on_timeout: "skip" } },
      ],
    });
    // Writes held over the first timeout: its alarm reads that the context is not paused, and
    // the commit of the timeout gets no answer, so the object marks storage away and forgets its
    // state. Nothing else of the flow commits until the second timeout, 39 s later.
    const outage = await holdWritesOver(flow, "soon", 10_000);
    const [soon, later] = await waitsLateness(ctx, flow.id, ["soon", "later"]);
    console.log(`waits timed out ${soon} ms and ${later} ms after they were due (writes held ${outage} ms)`);
    // The first ended once writes were taken again. The second moved by the outage as the object
    // saw it (from the commit that got no answer to the first call that came back: within the
    // hold, plus the alarm's retry, 5 s), not by the ~35 s from that commit to its timeout.
    expect(soon).toBeLessThan(outage + 6_000);
    expect(later).toBeGreaterThanOrEqual(0);
    expect(later).toBeLessThan(outage + 6_000);
  }, 180_000);

  it("does not move the timeout of a wait that started after the outage ended", async () => {
    const ctx = (await admin().client.createContext()).id;
    const runner = await stack().registerTestRunner(admin().client, ctx, { WORK_MS: "25000" }, 2);
    await runner.start();
    const flow = await admin().client.submitFlow(ctx, {
      start: true,
      jobs: [
        { name: "soon", wait: { event: "never.sent", key: "a", timeout: 5, on_timeout: "skip" } },
        { name: "work", script: "true", script_type: "sh" },
        { name: "gate", depends: ["work"], wait: { event: "never.sent", key: "b", timeout: 8, on_timeout: "skip" } },
      ],
    });
    // The first timeout's commit gets no answer within the storage deadline (5 s; writes held
    // from 3 s to 13 s): storage is marked away. It is back for the object by its alarm's retry,
    // about 15 s. Then, about 25 s, the job's result starts the second wait, and the commit that
    // starts it is the first to charge the outage: that wait never waited through it.
    const outage = await holdWritesOver(flow, "soon", 10_000);
    const [soon, gate] = await waitsLateness(ctx, flow.id, ["soon", "gate"]);
    console.log(`waits timed out ${soon} ms and ${gate} ms after they were due (writes held ${outage} ms)`);
    expect(soon).toBeLessThan(outage + 6_000);
    // On time, within the alarm's precision. It was moved by the outage (about 5 s, the outage
    // as the object saw it), and before that by the time from the outage to that commit (15 s).
    expect(gate).toBeGreaterThanOrEqual(0);
    expect(gate).toBeLessThan(2_500);
  }, 180_000);
});
