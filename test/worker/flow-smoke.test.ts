import { afterAll, describe, expect, it } from "vitest";
import { generateKeyPair, runnerKeyId } from "../../shared/auth/index.js";
import { testWorker } from "./harness.js";

const w = testWorker("flow-smoke");
afterAll(() => w.cleanup());

describe("a diamond flow through a pull runner", () => {
  it("runs to finished with results passed on", async () => {
    const admin = await w.newActor();
    const ctx = await admin.client.createContext();
    const runnerKey = await generateKeyPair();
    const runner = await admin.client.createRunner(ctx.id, { pubkey: runnerKey.x, runner_type: "sh", local: true });
    const asRunner = await w.clientFor(runnerKey, runnerKeyId(ctx.id, runner.id));

    const view = await admin.client.submitFlow(ctx.id, {
      env_vars: { GREETING: "hello" },
      start: true,
      jobs: [
        { name: "a", script: "echo a", script_type: "sh" },
        { name: "b", script: "echo b", script_type: "sh", depends: ["a"] },
        { name: "c", script: "echo c", script_type: "sh", depends: ["a"] },
        { name: "d", script: "echo d", script_type: "sh", depends: ["b", "c"] },
      ],
    });
    expect(view.status).toBe("started");

    const done: string[] = [];
    for (let round = 0; round < 10 && done.length < 4; round++) {
      const { deliveries } = (await asRunner.request("POST", `/v1/contexts/${ctx.id}/runners/${runner.id}/lease`, {
        max: 10,
      })) as {
        deliveries: {
          job_id: number;
          attempt: number;
          message: { job: { name: string; env_vars: Record<string, string> }[] };
          callbacks: { ack: string; result: string };
        }[];
      };
      for (const d of deliveries) {
        const path = (url: string) => new URL(url).pathname;
        await asRunner.request("POST", path(d.callbacks.ack), { attempt: d.attempt });
        const job = d.message.job[0] as { name: string; env_vars: Record<string, string> };
        expect(job.env_vars.GREETING).toBe("hello");
        await asRunner.request("POST", path(d.callbacks.result), {
          attempt: d.attempt,
          status: "finished",
          result: { out: job.name, seen: job.env_vars.FLOW_INPUTS ?? "" },
        });
        done.push(job.name);
      }
      await new Promise((r) => setTimeout(r, 50));
    }
    expect(done.sort()).toEqual(["a", "b", "c", "d"]);
    const final = await admin.client.loadFlow(ctx.id, view.id);
    expect(final.status).toBe("finished");
    expect(final.result.d?.seen).toContain('"b":{"out":"b"');
  });
});
