import { describe, expect, it } from "vitest";
import { SIZE_LIMITS, type FlowView } from "../../shared/model/index.js";
import { eventually } from "../support/eventually.js";
import { shJobs } from "../support/jobs.js";
import { queuedIn } from "../support/prefix.js";
import { usePrivateStack } from "../support/use-private-stack.js";

// Flows of 10,000 jobs, the most a flow holds, through the whole stack (wrangler dev, the REST
// endpoint, redis-server, a real runner): a 1 MiB flow file of 10,000 jobs all ready at once is
// created and started in storage calls each under 8 MiB, shown, read back after the Worker
// restarts, and cancelled; and 10,000 jobs run to the end on one runner. Timings are printed.

const { stack, admin } = usePrivateStack("large-flow", { cron: false });

/** What docs/limits.md promises of any storage call: well under storage's 10 MB. */
const WORST_CASE_BYTES = 8 * 1024 * 1024;
const JOBS = 10_000;

/** The flow's status, read from its record (a list of the context's flows, not its 10,000-job view). */
async function statusOf(ctx: number, flowId: number): Promise<string | undefined> {
  const page = await admin().client.listFlows(ctx, { limit: 10 });
  return page.items.find((f) => f.id === flowId)?.status;
}

describe("a flow of 10,000 jobs", () => {
  it("is created from a 1 MiB flow file with every job ready, in storage calls under 8 MiB, shown, and cancelled", async () => {
    const ctx = (await admin().client.createContext()).id;
    const names = Array.from({ length: JOBS }, (_, i) => `j${i}`);
    const bare = JSON.stringify({ start: true, jobs: shJobs("j", JOBS) }).length;
    const pad = Math.floor((SIZE_LIMITS.requestBody - bare - 1000) / JOBS);
    const jobs = names.map((name) => ({ name, script: `#${"x".repeat(pad)}`, script_type: "sh" as const }));
    stack().restLargest();
    const began = Date.now();
    const flow = await admin().client.submitFlow(ctx, { start: true, jobs });
    const created = Date.now() - began;
    const written = stack().restLargest();
    expect(flow.status).toBe("started");
    expect(flow.jobs).toHaveLength(JOBS);
    expect(written.request).toBeLessThan(WORST_CASE_BYTES);
    // Every job queued, none twice: no runner takes them.
    expect(await queuedIn(stack().redis, stack().keys, ctx)).toBe(JOBS);
    // Read back whole after the Worker's objects lost their memory.
    await stack().restartWorker();
    const readAt = Date.now();
    const again = await admin().client.loadFlow(ctx, flow.id);
    const rebuilt = Date.now() - readAt;
    const read = stack().restLargest();
    expect(again.jobs).toHaveLength(JOBS);
    expect(again.jobs.every((j) => j.status === "dispatched")).toBe(true);
    expect(read.response).toBeLessThan(WORST_CASE_BYTES);
    const cancelled = await admin().client.cancelFlow(ctx, flow.id, "enough");
    expect(cancelled.status).toBe("error");
    console.log(
      `large-flow: 10,000 jobs (${bare + pad * JOBS} bytes) created and started in ${created} ms, largest storage request ${written.request} bytes; read back in ${rebuilt} ms, largest answer ${read.response} bytes`,
    );
  }, 300_000);

  it("runs 10,000 jobs to the end on one runner", async () => {
    const ctx = (await admin().client.createContext()).id;
    // Results in the answers, 50 deliveries a POST: the runner's fastest way (docs/runners.md).
    const runner = await stack().registerTestRunner(admin().client, ctx, { INLINE: "1", DELIVERIES_PER_POST: "50" });
    await runner.start();
    const began = Date.now();
    const flow: FlowView = await admin().client.submitFlow(ctx, { start: true, jobs: shJobs("k", JOBS) });
    const submitted = Date.now() - began;
    await eventually(async () => ((await statusOf(ctx, flow.id)) === "finished" ? true : undefined), 280_000, 1_000);
    const ran = Date.now() - began;
    const view = await admin().client.loadFlow(ctx, flow.id);
    expect(view.status).toBe("finished");
    expect(view.jobs.filter((j) => j.status === "finished")).toHaveLength(JOBS);
    console.log(
      `large-flow: 10,000 jobs submitted in ${submitted} ms, ran to the end in ${ran} ms (${Math.round(JOBS / (ran / 1000))} jobs/s)`,
    );
  }, 300_000);
});
