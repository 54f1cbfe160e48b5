import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { generateKeyPair } from "../../shared/auth/index.js";
import type { FlowView } from "../../shared/model/index.js";
import { commandDelta, eventually, startPrivateStack, type PrivateStack } from "../support/private-stack.js";

// The cost of a job, counted by Redis itself (INFO commandstats: every command, including those
// run inside Lua scripts) on a stack of this file's own, and flows under concurrent results.

let stack: PrivateStack;
let admin: Awaited<ReturnType<PrivateStack["newActor"]>>;

beforeAll(async () => {
  stack = await startPrivateStack("budget");
  admin = await stack.newActor();
});
afterAll(() => stack?.stop());

async function pushRunner(contextId: number, extra: Record<string, string> = {}) {
  const key = await generateKeyPair();
  const placeholder = await admin.client.createRunner(contextId, { pubkey: key.x, runner_type: "sh", local: true });
  const port = await stack.startTestRunner(contextId, placeholder.id, key, extra);
  await admin.client.updateRunner(contextId, placeholder.id, { address: `http://127.0.0.1:${port}/`, local: false, concurrency: 200 });
  return placeholder.id;
}

async function finished(contextId: number, flowId: number, timeoutMs = 90_000): Promise<FlowView> {
  return eventually(async () => {
    const view = (await admin.client.request("GET", `/v1/contexts/${contextId}/flows/${flowId}`)) as FlowView;
    return view.status === "finished" || view.status === "error" ? view : undefined;
  }, timeoutMs, 200);
}

describe("budget: Redis commands per job", () => {
  it("runs a 100-job layered DAG with at most 6 commands per job", async () => {
    const ctx = await admin.client.createContext();
    await pushRunner(ctx.id);
    // Ten layers of ten; every job depends on every job of the layer before.
    const jobs = Array.from({ length: 100 }, (_, i) => {
      const layer = Math.floor(i / 10);
      return {
        name: `j${i}`,
        script: "true",
        script_type: "sh",
        depends: layer === 0 ? [] : Array.from({ length: 10 }, (_, k) => `j${(layer - 1) * 10 + k}`),
      };
    });
    // Warm up: the first flow pays for loading scripts and looking up keys.
    const warm = (await admin.client.request("POST", `/v1/contexts/${ctx.id}/flows`, { start: true, jobs: [{ name: "w", script: "true", script_type: "sh" }] })) as FlowView;
    expect((await finished(ctx.id, warm.id)).status).toBe("finished");

    const before = await stack.commandStats();
    const flow = (await admin.client.request("POST", `/v1/contexts/${ctx.id}/flows`, { start: true, jobs })) as FlowView;
    const done = await finished(ctx.id, flow.id);
    const after = await stack.commandStats();

    expect(done.status).toBe("finished");
    expect(Object.keys(done.result)).toHaveLength(100);
    const { total, byCommand } = commandDelta(before, after);
    const perJob = total / 100;
    console.log(`budget: ${total} Redis commands for 100 jobs = ${perJob.toFixed(2)} per job (goal 4, limit 6): ${JSON.stringify(byCommand)}`);
    expect(perJob).toBeLessThanOrEqual(6);
  });

  it("takes 50 concurrent results into one flow and loses none", async () => {
    const ctx = await admin.client.createContext();
    await pushRunner(ctx.id, { HOLD: "50" });
    const jobs = Array.from({ length: 50 }, (_, i) => ({ name: `p${i}`, script: "true", script_type: "sh" }));
    const flow = (await admin.client.request("POST", `/v1/contexts/${ctx.id}/flows`, { start: true, jobs })) as FlowView;
    const done = await finished(ctx.id, flow.id);
    expect(done.status).toBe("finished");
    expect(done.progress.finished).toBe(50);
    expect(Object.keys(done.result).sort()).toEqual(jobs.map((j) => j.name).sort());
    const stored = (await admin.client.request("GET", `/v1/contexts/${ctx.id}/flows?status=finished`)) as { items: { id: number; result: Record<string, unknown> }[] };
    expect(Object.keys(stored.items.find((f) => f.id === flow.id)?.result ?? {})).toHaveLength(50);
  });
});
