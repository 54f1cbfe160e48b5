import { afterAll, describe, expect, it } from "vitest";
import type { FlowSubmissionInput } from "../../shared/flow/index.js";
import type { FlowStreamEvent } from "../../shared/model/index.js";
import { startDelayProxy, type DelayProxy } from "../support/delay-proxy.js";
import { eventually } from "../support/eventually.js";
import { attemptsOf, flowEnd, runsIn } from "../support/flow-runs.js";
import { usePrivateStack } from "../support/use-private-stack.js";

// Runners slower to answer a delivery than the coordinator waits (issue 30): every delivery's
// POST times out, though the runner took it and runs it. Such a POST may have reached the
// runner, so the attempt is never delivered again, here or to another runner: it is counted as
// delivered, and the runner's reports (or, when none come, the acknowledgement deadline and a
// retry) decide. Real processes throughout: redis-server, the REST endpoint, workerd under
// `wrangler dev`, test runners and reference runners (behind a TCP proxy that holds their
// answers back). DELIVERY_TIMEOUT_MS is 1.5 s here (10 s by default) so that each case takes
// seconds.

const TIMEOUT_MS = 1_500;
/** How late the runners answer: well past the timeout, while the jobs they took run on. */
const ANSWER_AFTER_MS = 4_000;

const { stack, admin, submit, slotsHeld } = usePrivateStack("faults-slow-runner", {
  vars: { DELIVERY_TIMEOUT_MS: String(TIMEOUT_MS) },
});

const proxies: DelayProxy[] = [];
afterAll(() => Promise.all(proxies.map((p) => p.close())));

/** A flow of three independent jobs and one that depends on the first, each with `retries`. */
function fourJobs(retries: number, script: (name: string) => string): FlowSubmissionInput {
  return {
    jobs: ["a", "b", "c", "d"].map((name) => ({
      name,
      script: script(name),
      script_type: "sh" as const,
      retries,
      ...(name === "d" ? { depends: ["a"] } : {}),
    })),
  };
}

/** Waits until the runner holds no slot in Redis: every attempt it was given ended. */
function noSlotsHeld(contextId: number, runnerId: number): Promise<true> {
  return eventually(
    async () => ((await slotsHeld(contextId, runnerId)) === 0 ? true : undefined),
    10_000,
    100,
    `runner ${runnerId} holding no slot`,
  );
}

/** Each job of the flow began once, as attempt 1, across all the runners' outputs. */
function expectEachOnce(outputs: string[], flowId: number): void {
  expect(attemptsOf(runsIn(...outputs), flowId)).toEqual({ a: [1], b: [1], c: [1], d: [1] });
}

describe("runners slower to answer than the delivery timeout", () => {
  it("runs each job once, with retries 0 and 1, on runners that answer every delivery after the timeout", async () => {
    const ctx = (await admin().client.createContext()).id;
    // Two runners, so that a delivery sent again could go to the other one. FAST: nothing but
    // the result, 2.5 s after the delivery, after the POST timed out and before it is answered.
    const slow = { ANSWER_AFTER_MS: String(ANSWER_AFTER_MS), WORK_MS: "2500", FAST: "1" };
    const registered = await Promise.all([0, 1].map(() => stack().registerTestRunner(admin().client, ctx, slow)));
    const procs = await Promise.all(registered.map((r) => r.start()));
    const flows = await Promise.all(
      [0, 1].map((retries) =>
        submit(
          ctx,
          fourJobs(retries, () => "true"),
        ),
      ),
    );

    for (const flow of flows) {
      const view = await flowEnd(admin().client, ctx, flow.id);
      expect(view.status, JSON.stringify(view)).toBe("finished");
      expect(view.jobs.map((j) => j.attempt)).toEqual([1, 1, 1, 1]);
      expectEachOnce(
        procs.map((p) => p.stdout()),
        flow.id,
      );
    }
    // Each attempt was POSTed once: a runner that got one again would have said so.
    for (const proc of procs) expect(proc.stdout()).not.toMatch(/^duplicate /m);
    for (const r of registered) await noSlotsHeld(ctx, r.id);
  });

  it("retries, as a new attempt, a job whose runner took the delivery and then said nothing", async () => {
    const ctx = (await admin().client.createContext()).id;
    const silent = await stack().registerTestRunner(admin().client, ctx, {
      ANSWER_AFTER_MS: String(ANSWER_AFTER_MS),
      SILENT: "1",
    });
    // Registered, not up yet: the first attempt can only go to the silent runner.
    const other = await stack().registerTestRunner(admin().client, ctx);
    const ghost = await silent.start();
    const flow = await submit(ctx, {
      timeouts: { timeout_ack: 2, retry_base_ms: 50, retry_cap_ms: 200 },
      jobs: [{ name: "unheard", script: "true", script_type: "sh", retries: 1 }],
    });
    await ghost.waitForLine(new RegExp(`^ran unheard flow ${flow.id} attempt 1 `));
    const proc = await other.start();

    const view = await flowEnd(admin().client, ctx, flow.id);
    expect(view.status, JSON.stringify(view)).toBe("finished");
    expect(view.jobs[0]).toMatchObject({ status: "finished", attempt: 2, runner_id: other.id });
    expect(attemptsOf(runsIn(ghost.stdout()), flow.id)).toEqual({ unheard: [1] });
    expect(attemptsOf(runsIn(proc.stdout()), flow.id)).toEqual({ unheard: [2] });
    // The first attempt waited for its acknowledgement, and its error says why none came.
    let retry: FlowStreamEvent | undefined;
    for await (const event of admin().client.flowEvents(ctx, flow.id, { since: 0 })) {
      if (event.type === "job.retry_scheduled") retry = event;
      if (event.type === "flow.finished") break;
    }
    expect(retry).toMatchObject({
      attempt: 1,
      error: `attempt 1 was not acknowledged within 2 s: runner ${silent.id} did not answer within 1.5 s`,
    });
    expect(stack().workerLog()).toMatch(
      new RegExp(
        `flow ${flow.id} job \\d+ attempt 1: runner ${silent.id} did not answer within 1.5 s; counted as delivered`,
      ),
    );
  });

  it("runs each job once on reference runners whose answers come after the timeout", async () => {
    const ctx = (await admin().client.createContext()).id;
    // `started` only for a job still running after 5 s: a job of 2 s tells nothing but its
    // result, after its POST timed out.
    const registered = await Promise.all(
      [0, 1].map(() => stack().registerReferenceRunner(admin().client, ctx, "push", ["--started-after", "5000"])),
    );
    for (const r of registered) {
      const proxy = await startDelayProxy(r.port, ANSWER_AFTER_MS);
      proxies.push(proxy);
      await admin().client.updateRunner(ctx, r.id, { address: proxy.address });
    }
    const procs = await Promise.all(registered.map((r) => r.start()));
    // Jobs still running when their POSTs time out (a and c), and quick ones (b and d).
    const script = (name: string) =>
      `${name === "a" || name === "c" ? "sleep 2; " : ""}echo job=${name} > "$RESULT_FILE"\n`;
    const flows = await Promise.all([0, 1].map((retries) => submit(ctx, fourJobs(retries, script))));

    for (const flow of flows) {
      const view = await flowEnd(admin().client, ctx, flow.id);
      expect(view.status, JSON.stringify(view)).toBe("finished");
      expect(view.result).toEqual({ a: { job: "a" }, b: { job: "b" }, c: { job: "c" }, d: { job: "d" } });
      expect(view.jobs.map((j) => j.attempt)).toEqual([1, 1, 1, 1]);
      expectEachOnce(
        procs.map((p) => p.stdout()),
        flow.id,
      );
    }
    for (const r of registered) await noSlotsHeld(ctx, r.id);
  });

  it("has the reference runner report a result its answer was to carry when the coordinator hung up first", async () => {
    const ctx = (await admin().client.createContext()).id;
    // Its answer waits up to 4 s for the job's end, longer than the coordinator waits for it.
    const runner = await stack().registerReferenceRunner(admin().client, ctx, "push", ["--answer-within", "4000"]);
    const proc = await runner.start();
    const flow = await submit(ctx, {
      // A lost result would fail the attempt 3 s after its last report, and the flow with it.
      timeouts: { timeout_result: 3 },
      jobs: [
        { name: "slow", script: 'sleep 2; echo n=1 > "$RESULT_FILE"\n', script_type: "sh" },
        { name: "quick", script: 'echo n=2 > "$RESULT_FILE"\n', script_type: "sh" },
      ],
    });
    const view = await flowEnd(admin().client, ctx, flow.id);
    expect(view.status, JSON.stringify(view)).toBe("finished");
    expect(view.result).toEqual({ slow: { n: "1" }, quick: { n: "2" } });
    expect(attemptsOf(runsIn(proc.stdout()), flow.id)).toEqual({ slow: [1], quick: [1] });
    // The quick job's end went in its answer; the slow one's, once the coordinator hung up, as a report.
    expect(proc.stderr()).toMatch(
      /the coordinator hung up before the answer to \d+:\d+ attempt 1: its result goes as a report/,
    );
    expect(proc.stderr().match(/hung up/g)).toHaveLength(1);
    await noSlotsHeld(ctx, runner.id);
  });
});
