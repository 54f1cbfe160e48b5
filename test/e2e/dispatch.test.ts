import { describe, expect, it } from "vitest";
import type { FlowView } from "../../shared/model/index.js";
import { eventually } from "../support/eventually.js";
import { shJobs } from "../support/jobs.js";
import { attemptsOf, flowEnd, runsIn } from "../support/flow-runs.js";
import type { TestRunnerProcess } from "../support/private-stack.js";
import { usePrivateStack } from "../support/use-private-stack.js";
import { queuedIn } from "../support/prefix.js";

// Dispatch under load, with real processes: a runner never holds more attempts than its
// registered concurrency (counted at the runner and in Redis), the work never stalls while a
// runner has room, and every slot is free again once the work is done, whichever way each
// attempt ended. Timings are printed; the one bound asserted (a gap between deliveries while
// work waits) is the "within about a second", with room for a busy machine.

const { stack, admin, slotsHeld } = usePrivateStack("dispatch");

/** The `delivery <ms> load <n>` lines of a test runner started with TIMES=1. */
function deliveries(proc: TestRunnerProcess): { at: number; load: number }[] {
  return [...proc.output().matchAll(/^delivery (\d+) load (\d+)$/gm)].map((m) => ({
    at: Number(m[1]),
    load: Number(m[2]),
  }));
}

/** The longest time between two deliveries, in ms. */
function longestGap(list: { at: number }[]): number {
  const times = list.map((d) => d.at).sort((a, b) => a - b);
  let gap = 0;
  for (let i = 1; i < times.length; i++) gap = Math.max(gap, (times[i] as number) - (times[i - 1] as number));
  return gap;
}

/** Samples the runner's slot count in Redis every 50 ms until `stop` resolves; resolves with the largest seen. */
async function sampleSlots(ctx: number, runnerId: number, until: Promise<unknown>): Promise<number> {
  let done = false;
  void until.finally(() => (done = true));
  let most = 0;
  while (!done) {
    most = Math.max(most, await slotsHeld(ctx, runnerId));
    await new Promise((r) => setTimeout(r, 50));
  }
  return most;
}

/** Waits (10 s at most) until the runner holds `count` slots in Redis; `what` names the wait in a failure. */
async function untilSlots(ctx: number, runnerId: number, count: number, what: string): Promise<void> {
  await eventually(async () => ((await slotsHeld(ctx, runnerId)) === count ? true : undefined), 10_000, 50, what);
}

describe("runner concurrency is global", () => {
  it("gives a runner of concurrency 1 one attempt at a time, across flows", async () => {
    const ctx = (await admin().client.createContext()).id;
    const runner = await stack().registerTestRunner(admin().client, ctx, { TIMES: "1", WORK_MS: "30" }, 1);
    const proc = await runner.start();
    const flows = await Promise.all(
      [0, 1, 2].map((f) => admin().client.submitFlow(ctx, { start: true, jobs: shJobs(`f${f}-`, 3) })),
    );
    const ends = Promise.all(flows.map((f) => flowEnd(admin().client, ctx, f.id, 60_000)));
    const most = await sampleSlots(ctx, runner.id, ends);
    for (const view of await ends) expect(view.status).toBe("finished");
    expect(deliveries(proc)).toHaveLength(9);
    expect(Math.max(...deliveries(proc).map((d) => d.load))).toBe(1);
    expect(most).toBeLessThanOrEqual(1);
    expect(await slotsHeld(ctx, runner.id)).toBe(0);
  });

  it("runs 10 flows × 100 jobs on one runner of concurrency 50: never more than 50 at once, no stall while work waits", async () => {
    const ctx = (await admin().client.createContext()).id;
    const runner = await stack().registerTestRunner(admin().client, ctx, { TIMES: "1", WORK_MS: "20" }, 50);
    const proc = await runner.start();
    const began = Date.now();
    const flows = await Promise.all(
      Array.from({ length: 10 }, (_, f) =>
        admin().client.submitFlow(ctx, { start: true, jobs: shJobs(`f${f}-`, 100) }),
      ),
    );
    const ends = Promise.all(flows.map((f) => flowEnd(admin().client, ctx, f.id, 300_000)));
    const most = await sampleSlots(ctx, runner.id, ends);
    const views = await ends;
    const took = Date.now() - began;
    for (const view of views) expect(view.status, JSON.stringify(view.progress)).toBe("finished");
    const seen = deliveries(proc);
    const gap = longestGap(seen);
    console.log(
      `10 × 100 jobs on concurrency 50: ${took} ms, ${Math.round(1000 / (took / 1000))} jobs/s, most held at once ${most} (Redis) / ${Math.max(...seen.map((d) => d.load))} (runner), longest gap between deliveries ${gap} ms`,
    );
    expect(seen).toHaveLength(1000);
    for (const flow of flows)
      expect(Object.values(attemptsOf(runsIn(proc.output()), flow.id)).every((a) => a.length === 1 && a[0] === 1)).toBe(
        true,
      );
    expect(Math.max(...seen.map((d) => d.load))).toBeLessThanOrEqual(50);
    expect(most).toBeLessThanOrEqual(50);
    expect(gap).toBeLessThanOrEqual(1_500);
    expect(await slotsHeld(ctx, runner.id)).toBe(0);
    expect(await queuedIn(stack().redis, stack().keys, ctx)).toBe(0);
  }, 320_000);

  it("runs one flow of 1,000 jobs on a runner of concurrency 50 without a stall", async () => {
    const ctx = (await admin().client.createContext()).id;
    const runner = await stack().registerTestRunner(admin().client, ctx, { TIMES: "1" }, 50);
    const proc = await runner.start();
    const began = Date.now();
    const flow = await admin().client.submitFlow(ctx, { start: true, jobs: shJobs("k", 1000) });
    const end = flowEnd(admin().client, ctx, flow.id, 300_000);
    const most = await sampleSlots(ctx, runner.id, end);
    expect((await end).status).toBe("finished");
    const seen = deliveries(proc);
    console.log(
      `1 × 1,000 jobs on concurrency 50: ${Date.now() - began} ms, most held ${most}, longest gap ${longestGap(seen)} ms`,
    );
    expect(seen).toHaveLength(1000);
    expect(Math.max(...seen.map((d) => d.load))).toBeLessThanOrEqual(50);
    expect(longestGap(seen)).toBeLessThanOrEqual(1_500);
    expect(await slotsHeld(ctx, runner.id)).toBe(0);
  }, 320_000);

  it("runs 50 flows × 10 jobs across two runners, each within its own concurrency", async () => {
    const ctx = (await admin().client.createContext()).id;
    const a = await stack().registerTestRunner(admin().client, ctx, { TIMES: "1", WORK_MS: "10" }, 8);
    const b = await stack().registerTestRunner(admin().client, ctx, { TIMES: "1", WORK_MS: "10" }, 12);
    const [pa, pb] = await Promise.all([a.start(), b.start()]);
    const flows: FlowView[] = [];
    // 50 flows (it was 100: 500 deliveries show the limits as well, in half the time of the run's
    // serial tail, where this file runs alone).
    for (let i = 0; i < 50; i += 10)
      flows.push(
        ...(await Promise.all(
          Array.from({ length: 10 }, (_, k) =>
            admin().client.submitFlow(ctx, { start: true, jobs: shJobs(`g${i + k}-`, 10) }),
          ),
        )),
      );
    const ends = Promise.all(flows.map((f) => flowEnd(admin().client, ctx, f.id, 300_000)));
    const [mostA, mostB] = await Promise.all([sampleSlots(ctx, a.id, ends), sampleSlots(ctx, b.id, ends)]);
    for (const view of await ends) expect(view.status).toBe("finished");
    const [da, db] = [deliveries(pa), deliveries(pb)];
    console.log(
      `50 × 10 jobs on runners of 8 and 12: ${da.length} and ${db.length} deliveries, most held ${mostA} and ${mostB}`,
    );
    expect(da.length + db.length).toBe(500);
    expect(da.length).toBeGreaterThan(0);
    expect(db.length).toBeGreaterThan(0);
    expect(Math.max(...da.map((d) => d.load))).toBeLessThanOrEqual(8);
    expect(Math.max(...db.map((d) => d.load))).toBeLessThanOrEqual(12);
    expect([mostA <= 8, mostB <= 12]).toEqual([true, true]);
    expect([await slotsHeld(ctx, a.id), await slotsHeld(ctx, b.id)]).toEqual([0, 0]);
  }, 320_000);
});

describe("slots are freed on every path", () => {
  it("frees the slot when an attempt finishes, fails, times out, is cancelled, or its report comes too late", async () => {
    const ctx = (await admin().client.createContext()).id;
    const ok = await stack().registerTestRunner(admin().client, ctx, { FAIL: "bad" }, 5);
    await ok.start();
    // Finished, and failed for good.
    const done = await admin().client.submitFlow(ctx, {
      start: true,
      jobs: [{ name: "good", script: "true", script_type: "sh" }],
    });
    const failed = await admin().client.submitFlow(ctx, {
      start: true,
      jobs: [{ name: "bad", script: "true", script_type: "sh" }],
    });
    expect((await flowEnd(admin().client, ctx, done.id)).status).toBe("finished");
    expect((await flowEnd(admin().client, ctx, failed.id)).status).toBe("error");
    await untilSlots(ctx, ok.id, 0, "the slots of finished and failed attempts freed");

    // Timed out: a runner that acknowledges and goes silent; its slot comes back when the lease runs out.
    const silent = await stack().registerTestRunner(admin().client, ctx, { SILENT: "1" }, 5);
    await admin().client.updateRunner(ctx, ok.id, { concurrency: 1, script_types: ["python"] }); // only the silent runner takes sh now
    await silent.start();
    const ghosted = await admin().client.submitFlow(ctx, {
      start: true,
      timeouts: { timeout_result: 2 },
      jobs: [{ name: "ghost", script: "true", script_type: "sh" }],
    });
    await untilSlots(ctx, silent.id, 1, "the silent runner holding the attempt");
    const view = await flowEnd(admin().client, ctx, ghosted.id, 30_000);
    expect(view.error?.reason).toMatch(/went silent/);
    expect(await slotsHeld(ctx, silent.id)).toBe(0);

    // Cancelled while the runner holds it.
    const held = await admin().client.submitFlow(ctx, {
      start: true,
      jobs: [{ name: "held", script: "true", script_type: "sh" }],
    });
    await untilSlots(ctx, silent.id, 1, "the silent runner holding the attempt");
    await admin().client.cancelFlow(ctx, held.id, "enough");
    await untilSlots(ctx, silent.id, 0, "the cancelled attempt's slot freed");
  }, 120_000);
});
