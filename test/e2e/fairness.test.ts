import { describe, expect, it } from "vitest";
import { eventually } from "../support/eventually.js";
import { shJobs } from "../support/jobs.js";
import { flowEnd, runsIn } from "../support/flow-runs.js";
import { queuedIn } from "../support/prefix.js";
import { usePrivateStack } from "../support/use-private-stack.js";

// Fair dispatch and limits with real processes (docs/dispatch.md, "Fairness" and "Limits"): flows
// of one priority take turns for runners, a higher priority goes first, a flow's max_parallel
// and a context's max_inflight hold whichever runner takes the work. The orders asserted follow
// from the rule, not from timing: work is queued while dispatch is paused, then let go.

const { stack, admin, slotsHeld } = usePrivateStack("fairness");

/** Waits until `n` attempts wait in the context's queues (submissions' commits went through). */
async function untilQueued(ctx: number, n: number): Promise<void> {
  await eventually(
    async () => ((await queuedIn(stack().redis, stack().keys, ctx)) === n ? true : undefined),
    15_000,
    50,
    `${n} attempts queued`,
  );
}

/** The flows of the runs a runner began, in the order it began them. */
function flowOrder(output: string): number[] {
  return runsIn(output).map((r) => r.flow);
}

describe("fairness", () => {
  it("finishes 20 one-job flows before a 2,000-job flow submitted first is 10 % done (one runner of concurrency 4)", async () => {
    const ctx = (await admin().client.createContext()).id;
    const runner = await stack().registerTestRunner(admin().client, ctx, { WORK_MS: "20" }, 4);
    await runner.start();
    const big = await admin().client.submitFlow(ctx, { start: true, jobs: shJobs("big", 2_000) });
    await eventually(async () => ((await slotsHeld(ctx, runner.id)) === 4 ? true : undefined), 20_000, 50, "4 held");
    const small = await Promise.all(
      Array.from({ length: 20 }, (_, i) =>
        admin().client.submitFlow(ctx, { start: true, jobs: shJobs(`small${i}-`, 1) }),
      ),
    );
    const submitted = (await admin().client.loadFlow(ctx, big.id)).progress.finished;
    for (const flow of small) expect((await flowEnd(admin().client, ctx, flow.id, 60_000)).status).toBe("finished");
    const progress = (await admin().client.loadFlow(ctx, big.id)).progress;
    console.log(
      `fairness: the big flow had ${submitted} of 2000 jobs done when the 20 one-job flows were in, ${progress.finished} when they had all ended`,
    );
    expect(progress.finished).toBeLessThan(200);
    await admin().client.cancelFlow(ctx, big.id, "done with it");
  }, 120_000);

  it("takes turns between flows of one priority, one attempt each while the runner has one slot", async () => {
    const ctx = (await admin().client.createContext()).id;
    await admin().client.setPaused(ctx, true);
    const runner = await stack().registerTestRunner(admin().client, ctx, {}, 1);
    const proc = await runner.start();
    const flows = [];
    for (const name of ["a", "b", "c"])
      flows.push(await admin().client.submitFlow(ctx, { start: true, jobs: shJobs(name, 4) }));
    await untilQueued(ctx, 12);
    await admin().client.setPaused(ctx, false);
    for (const flow of flows) await flowEnd(admin().client, ctx, flow.id);
    const [a, b, c] = flows.map((f) => f.id);
    expect(flowOrder(proc.output())).toEqual([a, b, c, a, b, c, a, b, c, a, b, c]);
  }, 60_000);

  it("serves a higher priority first, then the rest in turn", async () => {
    const ctx = (await admin().client.createContext()).id;
    await admin().client.setPaused(ctx, true);
    const runner = await stack().registerTestRunner(admin().client, ctx, {}, 1);
    const proc = await runner.start();
    const low = await admin().client.submitFlow(ctx, { start: true, jobs: shJobs("low", 3) });
    const normal = await admin().client.submitFlow(ctx, { start: true, priority: 0, jobs: shJobs("normal", 2) });
    const high = await admin().client.submitFlow(ctx, { start: true, priority: 10, jobs: shJobs("high", 3) });
    expect(high.priority).toBe(10);
    await untilQueued(ctx, 8);
    await admin().client.setPaused(ctx, false);
    for (const flow of [low, normal, high]) await flowEnd(admin().client, ctx, flow.id);
    expect(flowOrder(proc.output())).toEqual([high.id, high.id, high.id, low.id, normal.id, low.id, normal.id, low.id]);
  }, 60_000);
});

describe("limits", () => {
  it("never holds more of a flow's attempts than its max_parallel, on a runner with room for more", async () => {
    const ctx = (await admin().client.createContext()).id;
    const runner = await stack().registerTestRunner(admin().client, ctx, { TIMES: "1", WORK_MS: "100" }, 10);
    const proc = await runner.start();
    const capped = await admin().client.submitFlow(ctx, { start: true, max_parallel: 2, jobs: shJobs("cap", 12) });
    expect(capped.max_parallel).toBe(2);
    expect((await flowEnd(admin().client, ctx, capped.id)).status).toBe("finished");
    const loads = [...proc.output().matchAll(/^delivery \d+ load (\d+)$/gm)].map((m) => Number(m[1]));
    expect(loads).toHaveLength(12);
    expect(Math.max(...loads)).toBe(2);
    expect(await slotsHeld(ctx, runner.id)).toBe(0);
  }, 60_000);

  it("holds a context's attempts in flight to max_inflight across its runners and flows", async () => {
    const ctx = (await admin().client.createContext()).id;
    const limited = await admin().client.setLimits(ctx, { max_inflight: 3 });
    expect(limited.max_inflight).toBe(3);
    const runners = await Promise.all(
      [0, 1].map(async () => {
        const r = await stack().registerTestRunner(admin().client, ctx, { WORK_MS: "100" }, 5);
        await r.start();
        return r;
      }),
    );
    const flows = await Promise.all(
      ["p", "q"].map((name) => admin().client.submitFlow(ctx, { start: true, jobs: shJobs(name, 8) })),
    );
    let most = 0;
    let done = false;
    const ends = Promise.all(flows.map((f) => flowEnd(admin().client, ctx, f.id))).finally(() => (done = true));
    while (!done) {
      const held = (await Promise.all(runners.map((r) => slotsHeld(ctx, r.id)))).reduce((a, b) => a + b, 0);
      most = Math.max(most, held);
      await new Promise((r) => setTimeout(r, 20));
    }
    for (const view of await ends) expect(view.status).toBe("finished");
    expect(most).toBe(3);
    // Lifting the limit lets the context use both runners whole again.
    expect((await admin().client.setLimits(ctx, { max_inflight: null })).max_inflight).toBeUndefined();
  }, 60_000);
});
