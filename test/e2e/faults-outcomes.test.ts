import { existsSync, rmSync, writeFileSync } from "node:fs";
import path from "node:path";
import { describe, expect, it } from "vitest";
import { actorKeyId } from "../../shared/auth/index.js";
import { ApiError, signerFromJwk } from "../../shared/client/index.js";
import type { FlowSubmissionInput } from "../../shared/flow/index.js";
import type { FlowStreamEvent, FlowView } from "../../shared/model/index.js";
import { layeredJobs } from "../support/jobs.js";
import { answersIn, attemptsOf, flowEnd, runsIn } from "../support/flow-runs.js";
import { parsed, readSse } from "../support/streams.js";
import { usePrivateStack } from "../support/use-private-stack.js";
import { queuedIn } from "../support/prefix.js";

// The third outcome of a storage call: it timed out (the API answered 503), yet Redis ran it
// later. Redis stalls with CLIENT PAUSE (commands wait and run when the pause ends) and SIGSTOP;
// the Worker is restarted, losing every Durable Object's memory. Every flow still reaches its
// end, each job runs once (counted at the runner), no slot is left held, nothing answers 5xx
// but the 503s of the outage itself, and time storage was away is not charged to runners.

const { stack, admin, slotsHeld } = usePrivateStack("faults-outcomes");

/** Each job of a flow ran exactly once, as attempt 1. */
function ranOnce(output: string, flowId: number, jobs: { name?: string | undefined }[]): void {
  expect(attemptsOf(runsIn(output), flowId)).toEqual(Object.fromEntries(jobs.map((j) => [j.name, [1]])));
}

describe("storage calls whose outcome was unknown", () => {
  it("finishes a flow whose commits timed out while Redis was paused and ran when it resumed: each job once, no slot held", async () => {
    const ctx = (await admin().client.createContext()).id;
    const runner = await stack().registerTestRunner(admin().client, ctx, { WORK_MS: "300" }, 5);
    const proc = await runner.start();
    const jobs = layeredJobs("p", 4, 5);
    const flow = await admin().client.submitFlow(ctx, { start: true, jobs });
    // Mid-flow: once the first layer's results come in, Redis holds every command for 12 s.
    await answersIn(proc, new RegExp(`^answered result p\\d+ flow ${flow.id} `), 3, 30_000);
    await stack().pauseClients(12_000);
    const view = await flowEnd(admin().client, ctx, flow.id, 90_000);
    expect(view.status, JSON.stringify(view.jobs.map((j) => [j.key, j.status, j.waiting]))).toBe("finished");
    ranOnce(proc.output(), flow.id, jobs);
    expect(await slotsHeld(ctx, runner.id)).toBe(0);
    expect(await queuedIn(stack().redis, stack().keys, ctx)).toBe(0);
    expect(stack().workerLog()).not.toMatch(/FlowCoordinator: |Internal error/);
    // The flow's stream told it all, the commits that timed out included (caught up when read back).
    const stream = await readSse(
      `${stack().url}/v1/contexts/${ctx}/flows/${flow.id}/events`,
      await signerFromJwk(admin().jwk, actorKeyId(admin().id)),
      (e) => e.some((x) => x.event === "flow.finished"),
    );
    const events = parsed<FlowStreamEvent>(stream.events);
    expect(events.map((e) => e.seq)).toEqual(events.map((_, i) => i + 1));
    expect(new Set(events.filter((e) => e.type === "job.finished").map((e) => e.job_id)).size).toBe(jobs.length);
    expect(events.filter((e) => e.type.startsWith("flow.")).map((e) => e.type)).toEqual([
      "flow.created",
      "flow.started",
      "flow.finished",
    ]);
  }, 120_000);

  it("keeps Idempotency-Key submissions whole across a stall: a retried key answers its flow, created and started once", async () => {
    const ctx = (await admin().client.createContext()).id;
    const runner = await stack().registerTestRunner(admin().client, ctx, {}, 20);
    const proc = await runner.start();
    const statuses: number[] = [];
    /** Submits with the key until an answer comes; every answer but 503 ends it. */
    const submit = async (key: string, body: FlowSubmissionInput): Promise<FlowView> => {
      for (;;) {
        try {
          const view = await admin().client.submitFlow(ctx, body, { idempotencyKey: key });
          statuses.push(200);
          return view;
        } catch (error) {
          if (!(error instanceof ApiError)) throw error;
          statuses.push(error.status);
          if (error.status !== 503) throw error;
          await new Promise((r) => setTimeout(r, 500));
        }
      }
    };
    const bodies = Array.from({ length: 40 }, (_, i) => ({
      start: true,
      jobs: [
        { name: `k${i}a`, script: "true", script_type: "sh" as const },
        { name: `k${i}b`, script: "true", script_type: "sh" as const, depends: [`k${i}a`] },
      ],
    }));
    const submissions = bodies.map((body, i) =>
      new Promise<FlowView>((resolve) => setTimeout(resolve, i * 100)).then(() => submit(`order-${ctx}-${i}`, body)),
    );
    await new Promise((r) => setTimeout(r, 1_500));
    await stack().pauseClients(8_000);
    const views = await Promise.all(submissions);
    console.log(
      `40 keyed submissions across an 8 s stall: answers ${JSON.stringify(Object.fromEntries([...new Set(statuses)].map((s) => [s, statuses.filter((x) => x === s).length])))}`,
    );
    expect(statuses.filter((s) => s !== 200 && s !== 503)).toEqual([]);
    expect(new Set(views.map((v) => v.id)).size).toBe(40);
    for (const [i, view] of views.entries()) {
      const end = await flowEnd(admin().client, ctx, view.id, 60_000);
      expect(end.status, JSON.stringify(end)).toBe("finished");
      ranOnce(proc.output(), view.id, bodies[i]?.jobs ?? []);
      // The key answers the same flow ever after.
      expect(
        (
          await admin().client.submitFlow(ctx, bodies[i] as FlowSubmissionInput, {
            idempotencyKey: `order-${ctx}-${i}`,
          })
        ).id,
      ).toBe(view.id);
    }
    expect((await admin().client.listFlows(ctx, { limit: 100 })).total).toBe(40);
    // The same key with another request is refused, naming the header.
    await expect(
      admin().client.submitFlow(
        ctx,
        { start: true, jobs: [{ name: "other", script: "true", script_type: "sh" }] },
        { idempotencyKey: `order-${ctx}-0` },
      ),
    ).rejects.toMatchObject({
      status: 422,
      code: "idempotency-key-reused",
    });
  }, 180_000);

  it("does not charge runners for an outage: a result retried after storage is back is applied, not raced by a re-run", async () => {
    const ctx = (await admin().client.createContext()).id;
    // The job reports started, works 2 s, then reports its result, retrying while storage is away.
    const runner = await stack().registerTestRunner(
      admin().client,
      ctx,
      { WORK_MS: "2000", REPORT_RETRY_MS: "60000" },
      2,
    );
    const proc = await runner.start();
    // Its lease: 4 s of silence after a report. The outage below lasts 12 s.
    const flow = await admin().client.submitFlow(ctx, {
      start: true,
      timeouts: { timeout_result: 4 },
      jobs: [{ name: "steady", script: "true", script_type: "sh", retries: 2 }],
    });
    await proc.waitForLine(new RegExp(`^ran steady flow ${flow.id} attempt 1 `), 20_000);
    await new Promise((r) => setTimeout(r, 500)); // its started report lands
    stack().pauseRedis();
    try {
      await new Promise((r) => setTimeout(r, 12_000));
    } finally {
      stack().continueRedis();
    }
    const view = await flowEnd(admin().client, ctx, flow.id, 60_000);
    expect(view.status, JSON.stringify(view)).toBe("finished");
    expect(view.jobs[0]).toMatchObject({ attempt: 1, status: "finished" });
    expect(attemptsOf(runsIn(proc.output()), flow.id)).toEqual({ steady: [1] });
  }, 120_000);

  it("keeps retrying runners that refuse, across a restart of the Worker, with nobody watching the flow", async () => {
    const ctx = (await admin().client.createContext()).id;
    const refuse = path.join(stack().dir, `refuse-${ctx}`);
    writeFileSync(refuse, "down");
    const runner = await stack().registerTestRunner(admin().client, ctx, { REFUSE_FILE: refuse }, 4);
    const proc = await runner.start();
    const jobs = [{ name: "patient", script: "true", script_type: "sh" as const }];
    const flow = await admin().client.submitFlow(ctx, { start: true, jobs });
    // Refused a few times: the runner waits out a growing backoff, kept by the dispatcher.
    await new Promise((r) => setTimeout(r, 4_000));
    const trouble = (await admin().client.loadRunner(ctx, runner.id)).dispatch;
    expect(trouble.last_error).toBe("answered 503 Service Unavailable");
    expect(trouble.failures).toBeGreaterThanOrEqual(2);
    // Every object's memory goes; nobody reads the flow from now on (a read would wake its object).
    await stack().restartWorker();
    rmSync(refuse);
    await proc.waitForLine(new RegExp(`^ran patient flow ${flow.id} attempt 1 `), 60_000);
    expect(existsSync(refuse)).toBe(false);
    const view = await flowEnd(admin().client, ctx, flow.id, 30_000);
    expect(view.status).toBe("finished");
    ranOnce(proc.output(), flow.id, jobs);
    expect((await admin().client.loadRunner(ctx, runner.id)).dispatch).toEqual({ in_flight: 0 });
  }, 120_000);
});
