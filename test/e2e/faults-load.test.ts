import { describe, expect, it } from "vitest";
import { eventually } from "../support/eventually.js";
import { shJobs } from "../support/jobs.js";
import { answersIn, attemptsOf, flowEnd, runsIn } from "../support/flow-runs.js";
import { storedResults } from "../support/stored-results.js";
import { usePrivateStack } from "../support/use-private-stack.js";
import { queuedIn } from "../support/prefix.js";

// Concurrency and bad input against real processes (redis-server, the REST endpoint, workerd
// under `wrangler dev`, test runner processes): two sweeps and the dispatcher's own rounds taking
// from the same queue at once,
// 100 results arriving together into one flow, a runner posting an unreadable result. No job is
// lost, none runs more than `retries + 1` times (counted at the runner), the final state is right.

const { stack, admin, submit, slotsHeld } = usePrivateStack("faults-load");

/** What each job of `jobs` returns from the test runner on attempt 1. */
const firstAttempts = (jobs: { name: string }[]) =>
  Object.fromEntries(jobs.map((j) => [j.name, { job: j.name, attempt: "1" }]));

describe("concurrency and bad input", () => {
  it("delivers every queued job exactly once when two sweeps and the dispatcher take from the queue at once", async () => {
    const ctx = (await admin().client.createContext()).id;
    const queued = () => queuedIn(stack().redis, stack().keys, ctx);
    // No runner yet: every job's attempt waits in its flow's queue for sh.
    const jobs = [shJobs("s", 6), shJobs("t", 6)];
    const flows = await Promise.all(jobs.map((list) => submit(ctx, { jobs: list })));
    await eventually(async () => ((await queued()) === 12 ? true : undefined), 10_000);

    const runner = await stack().registerTestRunner(admin().client, ctx, {}, 3);
    const proc = await runner.start();
    // Registering the runner woke the dispatcher; the sweep only looks at contexts due in
    // sweep:due: make this one due, then fire cron twice at once, while the dispatcher works.
    await stack().redis.exec(["ZADD", stack().keys.sweepDue(), "1", String(ctx)]);
    const sweeps = await Promise.all([stack().sweep(), stack().sweep()]);
    expect(sweeps.map((s) => s.status)).toEqual([200, 200]);

    for (const [i, flow] of flows.entries()) {
      const view = await flowEnd(admin().client, ctx, flow.id);
      expect(view.status, JSON.stringify(view)).toBe("finished");
      expect(view.result).toEqual(firstAttempts(jobs[i] ?? []));
      expect(view.jobs.every((j) => j.status === "finished" && j.attempt === 1)).toBe(true);
      expect(attemptsOf(runsIn(proc.output()), flow.id)).toEqual(
        Object.fromEntries((jobs[i] ?? []).map((j) => [j.name, [1]])),
      );
    }
    expect(runsIn(proc.output())).toHaveLength(12);
    expect(await queued()).toBe(0);
    expect(await slotsHeld(ctx, runner.id)).toBe(0);
  });

  it("takes 100 concurrent results into one flow and loses none", async () => {
    const ctx = (await admin().client.createContext()).id;
    const runner = await stack().registerTestRunner(admin().client, ctx, { HOLD: "100" });
    const proc = await runner.start();
    const jobs = shJobs("c", 100);
    const flow = await submit(ctx, { jobs });

    const view = await flowEnd(admin().client, ctx, flow.id, 90_000);
    expect(view.status, JSON.stringify(view.progress)).toBe("finished");
    expect(view.progress).toMatchObject({ total: 100, finished: 100 });
    expect(view.result).toEqual(firstAttempts(jobs));
    expect(view.jobs.every((j) => j.status === "finished" && j.attempt === 1)).toBe(true);
    expect(attemptsOf(runsIn(proc.output()), flow.id)).toEqual(Object.fromEntries(jobs.map((j) => [j.name, [1]])));
    // Each result was taken on its first try, all at once.
    const answers = await answersIn(proc, "answered result ", 100);
    expect(answers.filter((l) => !l.endsWith(" attempt 1 200 applied"))).toEqual([]);
    expect(answers).toHaveLength(100);
    const kept = (await storedResults(stack(), ctx, admin().id, flow.id)) ?? {};
    expect(Object.keys(kept)).toHaveLength(100);
    expect(kept).toEqual(firstAttempts(jobs));
  });

  it("answers an unreadable result 400, keeps it as a payload dead letter, and still finishes the flow", async () => {
    const ctx = (await admin().client.createContext()).id;
    const runner = await stack().registerTestRunner(admin().client, ctx, { POISON: "1" });
    const proc = await runner.start();
    const flow = await submit(ctx, { jobs: [{ name: "poisoned", script: "true", script_type: "sh" }] });

    const view = await flowEnd(admin().client, ctx, flow.id);
    expect(view.status, JSON.stringify(view)).toBe("finished");
    expect(view.result).toEqual({ poisoned: { job: "poisoned", attempt: "1" } });
    expect(view.jobs[0]).toMatchObject({ status: "finished", attempt: 1 });
    expect(attemptsOf(runsIn(proc.output()), flow.id)).toEqual({ poisoned: [1] });
    const answers = (await answersIn(proc, "answered ", 2)).filter((l) => l.includes(` flow ${flow.id} `));
    expect(answers).toEqual([
      `answered poison poisoned flow ${flow.id} attempt 1 400 invalid-input`,
      `answered result poisoned flow ${flow.id} attempt 1 200 applied`,
    ]);

    const letters = await eventually(async () => {
      const { items } = await admin().client.listDeadLetters(ctx);
      return items.length > 0 ? items : undefined;
    }, 10_000);
    expect(letters).toHaveLength(1);
    expect(letters[0]).toMatchObject({
      kind: "payload",
      context_id: ctx,
      flow_id: flow.id,
      job_id: view.jobs[0]?.id,
      reason: expect.stringContaining(`result report of runner ${runner.id}: body.status`),
      payload: expect.stringContaining('"status":"exploded"'),
    });
  });

  it("keeps giving work to a runner at its concurrency limit after an attempt on it failed", async () => {
    // One job at a time; the job fails on its first attempt, and its retry can only go to the
    // same runner, which is idle again: it must get it (and fail it again, on purpose).
    const ctx = (await admin().client.createContext()).id;
    const runner = await stack().registerTestRunner(admin().client, ctx, { FAIL: "flaky" }, 1);
    const proc = await runner.start();
    const flow = await submit(ctx, {
      timeouts: { timeout: 5, retry_base_ms: 50, retry_cap_ms: 200 },
      jobs: [{ name: "flaky", script: "false", script_type: "sh", retries: 1 }],
    });
    const view = await flowEnd(admin().client, ctx, flow.id);
    expect(view.status).toBe("error");
    expect(view.jobs[0], JSON.stringify(view.jobs[0])).toMatchObject({
      status: "error",
      attempt: 2,
      error: "job flaky failed on purpose",
    });
    expect(attemptsOf(runsIn(proc.output()), flow.id)).toEqual({ flaky: [1, 2] });
    const letters = (await admin().client.listDeadLetters(ctx)).items;
    expect(letters.map((l) => [l.kind, l.job_key, l.attempts, l.reason])).toEqual([
      ["job", "flaky", 2, "job flaky failed on purpose"],
    ]);
  });
});
