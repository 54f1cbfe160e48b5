import type { AddressInfo } from "node:net";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { generateKeyPair, importPublicKey } from "../../shared/auth/index.js";
import type { FlowView, Message } from "../../shared/model/index.js";
import { signedServer } from "../support/http.js";
import { commandDelta, eventually, startPrivateStack, type PrivateStack } from "../support/private-stack.js";

// Through a stack of this file's own (redis-server, REST endpoint, wrangler dev) and real runner
// processes: the cost of a job, counted by Redis itself (INFO commandstats: every command,
// including those run inside Lua scripts), concurrent and duplicated results, the result POSTed
// to the actor, and the cost of an idle sweep.

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

/** Status reads the test made: each costs Redis two commands (its nonce and its permission check). */
let polls = 0;

async function finished(contextId: number, flowId: number, timeoutMs = 90_000): Promise<FlowView> {
  return eventually(async () => {
    polls++;
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
    polls = 0;
    const flow = (await admin.client.request("POST", `/v1/contexts/${ctx.id}/flows`, { start: true, jobs })) as FlowView;
    const done = await finished(ctx.id, flow.id);
    const after = await stack.commandStats();

    expect(done.status).toBe("finished");
    expect(Object.keys(done.result)).toHaveLength(100);
    const { total, byCommand } = commandDelta(before, after);
    // The test watching the flow is not the flow's cost: its reads are counted out.
    const watching = 2 * polls;
    const perJob = (total - watching) / 100;
    console.log(
      `budget: ${total - watching} Redis commands for 100 jobs = ${perJob.toFixed(2)} per job (goal 4, limit 6); ` +
        `the test's ${polls} status reads added ${watching} more; by command: ${JSON.stringify(byCommand)}`,
    );
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

describe("delivery guarantees with real processes", () => {
  it("keeps the outcome when every result arrives twice and a late started follows it", async () => {
    const ctx = await admin.client.createContext();
    await pushRunner(ctx.id, { CHAOS: "1", FAIL: "bad" });
    const ok = (await admin.client.request("POST", `/v1/contexts/${ctx.id}/flows`, {
      start: true,
      jobs: [
        { name: "a", script: "true", script_type: "sh" },
        { name: "b", script: "true", script_type: "sh", depends: ["a"] },
        { name: "c", script: "true", script_type: "sh", depends: ["a"] },
        { name: "d", script: "true", script_type: "sh", depends: ["b", "c"] },
      ],
    })) as FlowView;
    const done = await finished(ctx.id, ok.id);
    expect(done.status).toBe("finished");
    expect(done.jobs.map((j) => [j.key, j.status, j.attempt])).toEqual([["a", "finished", 1], ["b", "finished", 1], ["c", "finished", 1], ["d", "finished", 1]]);
    const failing = (await admin.client.request("POST", `/v1/contexts/${ctx.id}/flows`, {
      start: true,
      jobs: [
        { name: "bad", script: "false", script_type: "sh" },
        { name: "after", script: "true", script_type: "sh", depends: ["bad"] },
      ],
    })) as FlowView;
    const failed = await finished(ctx.id, failing.id);
    expect(failed.status).toBe("error");
    expect(failed.error).toMatchObject({ name: "bad", reason: "job bad failed on purpose" });
    expect(failed.jobs.find((j) => j.key === "after")).toMatchObject({ status: "error", attempt: 0 });
  });

  it("POSTs the flow's result, signed by the coordinator, to the actor's https address", async () => {
    const received: Message[] = [];
    const directory = (await (await fetch(`${stack.url}/.well-known/http-message-signatures-directory`)).json()) as { keys: { kid: string; x: string }[] };
    const server = signedServer(
      async (kid) => {
        const key = directory.keys.find((k) => k.kid === kid);
        return key ? importPublicKey(key.x) : null;
      },
      (body, res) => {
        received.push((JSON.parse(Buffer.from(body).toString()) as { message: Message }).message);
        res.writeHead(204).end();
      },
    );
    await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
    try {
      const port = (server.address() as AddressInfo).port;
      await admin.client.updateActor(admin.id, { address: [{ type: "https", url: `http://127.0.0.1:${port}/inbox` }] });
      const ctx = await admin.client.createContext();
      await pushRunner(ctx.id);
      const flow = (await admin.client.request("POST", `/v1/contexts/${ctx.id}/flows`, { start: true, jobs: [{ name: "only", script: "true", script_type: "sh" }] })) as FlowView;
      expect((await finished(ctx.id, flow.id)).status).toBe("finished");
      const message = await eventually(async () => received.find((m) => m.flow_result?.flow_id === flow.id), 30_000);
      expect(message).toMatchObject({ to: admin.id, flow_result: { status: "finished", result: { only: { job: "only", attempt: "1" } } } });
    } finally {
      await admin.client.updateActor(admin.id, { address: [] });
      server.close();
    }
  });

  it("costs one Redis command for a sweep with nothing due", async () => {
    const sweep = () => fetch(`${stack.url}/__scheduled?cron=*+*+*+*+*`).then((r) => r.text());
    await sweep(); // anything left due from the tests above is handled now
    const before = await stack.commandStats();
    await sweep();
    const { total, byCommand } = commandDelta(before, await stack.commandStats());
    console.log(`idle sweep: ${total} Redis command(s): ${JSON.stringify(byCommand)}`);
    expect(total).toBe(1);
  });
});
