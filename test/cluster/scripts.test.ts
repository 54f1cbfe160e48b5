import { rmSync, writeFileSync } from "node:fs";
import path from "node:path";
import { afterAll, beforeAll, describe, expect, inject, it } from "vitest";
import { generateKeyPair } from "../../shared/auth/index.js";
import { Store } from "../../shared/store/index.js";
import { eventually } from "../support/eventually.js";
import { answersIn, flowEnd } from "../support/flow-runs.js";
import { RedisCluster } from "../support/redis-cluster.js";
import { auditRuns, projectScripts, ScriptMonitor, type ScriptRun } from "../support/script-audit.js";
import { usePrivateStack } from "../support/use-private-stack.js";

// Every Lua script of shared/store/scripts, run by the coordinator itself (the Worker over the
// REST endpoint over a real Redis Cluster) with the keys it really builds, watched on every
// master (MONITOR): no script is refused (CROSSSLOT, a key of another node), and no command a
// script runs touches a key its KEYS do not name (Redis Cluster refuses such a key only when it
// is in another slot; in the same slot it goes unnoticed, and would break the day it is not).

const cluster = RedisCluster.attach(inject("redisCluster"));
const { stack, admin } = usePrivateStack("cluster-scripts", { cluster: { seeds: cluster.seeds }, cron: false });
const sh = (name: string, extra: Record<string, unknown> = {}) => ({
  name,
  script: "true",
  script_type: "sh" as const,
  ...extra,
});

let monitor: ScriptMonitor;
let runs: ScriptRun[];
beforeAll(async () => {
  monitor = await ScriptMonitor.start(await cluster.masters());
});
afterAll(() => monitor.stop());

describe("the project's Lua scripts on a Redis Cluster", () => {
  it("run the coordinator's whole life: actors, contexts, runners, flows, dispatch, mail, templates, schedules, retention, deletion", async () => {
    const client = admin().client;
    const first = await stack().newActor();
    await client.updateActor(admin().id, { address: [] });
    // A key rotated: the old key's claim released.
    const other = { id: first.id, client: (await first.client.rotateKey(first.id, await generateKeyPair())).client };
    const ctx = (await client.createContext({ admins: [admin().id] })).id;
    await client.grant(ctx, "readers", other.id);
    await client.revoke(ctx, "readers", other.id);
    await client.grant(ctx, "executors", other.id);
    await client.setLimits(ctx, { flow_starts_per_minute: 600 });
    await client.lifecycle.setRetention(ctx, { finished_seconds: 1, error_seconds: 1, inbox_seconds: 1 });

    // Runners: one that works (5 at a time, so work queues for the dispatcher), one whose key
    // changes and which goes, one whose unreadable reports become dead letters.
    const proc = await (await stack().registerTestRunner(client, ctx, {}, 5)).start();
    const spare = await stack().registerTestRunner(client, ctx);
    await client.updateRunner(ctx, spare.id, { pubkey: (await generateKeyPair()).x });
    await client.deleteRunner(ctx, spare.id);

    // Flows: a wide one (claims in the commit and the dispatcher's rounds), one failing with a
    // retry, one waiting for an event, a job outside any flow.
    const wide = await client.submitFlow(ctx, { start: true, jobs: Array.from({ length: 30 }, (_, i) => sh(`w${i}`)) });
    const failing = await client.submitFlow(ctx, { start: true, jobs: [sh("boom", { script: "exit 1", retries: 1 })] });
    const waiting = await client.submitFlow(ctx, {
      start: true,
      jobs: [{ name: "approval", wait: { event: "ok", key: "k1", timeout: 60 } }],
    });
    await client.request("POST", `/v1/contexts/${ctx}/jobs`, { job: sh("alone"), start: true });
    expect(await client.sendEvent(ctx, { name: "ok", key: "k1", data: {} })).toMatchObject({ resumed: 1 });
    expect((await flowEnd(client, ctx, wide.id)).status).toBe("finished");
    await flowEnd(client, ctx, failing.id);
    expect((await flowEnd(client, ctx, waiting.id)).status).toBe("finished");
    await answersIn(proc, "answered result", 32, 30_000);

    // Mail: a chat line relayed into an inbox and read; a line left unread for retention.
    await other.client.request("POST", `/v1/contexts/${ctx}/messages`, { to: admin().id, message: "hi" });
    await eventually(async () => {
      const { messages } = (await client.request("GET", `/v1/contexts/${ctx}/inbox?pop=true&max=100`)) as {
        messages: unknown[];
      };
      return messages.length > 0 ? true : undefined;
    }, 20_000);
    await other.client.request("POST", `/v1/contexts/${ctx}/messages`, { to: admin().id, message: "unread" });

    // Templates and schedules, put, used and removed.
    await client.templates.put(ctx, "hello", { jobs: [sh("hello")] });
    const fromTemplate = await client.templates.start(ctx, "hello", {});
    await flowEnd(client, ctx, fromTemplate.id);
    await client.templates.delete(ctx, "hello");
    const schedule = await client.schedules.create(ctx, { template: { jobs: [sh("tick")] }, interval_seconds: 3600 });
    await client.schedules.pause(ctx, schedule.id);
    await client.schedules.delete(ctx, schedule.id);

    // A dead letter (an unreadable report), deleted; a flow removed; figures scraped.
    const poison = await stack().registerTestRunner(client, ctx, { POISON: "1" });
    await poison.start();
    const poisoned = await client.submitFlow(ctx, { start: true, jobs: [sh("p", { runner_id: poison.id })] });
    await flowEnd(client, ctx, poisoned.id);
    const letters = await eventually(
      async () =>
        (await client.listDeadLetters(ctx)).items.length > 0 ? (await client.listDeadLetters(ctx)).items : undefined,
      20_000,
    );
    await client.deleteDeadLetter(ctx, letters[0]!.id);
    await client.lifecycle.deleteFlow(ctx, wide.id);
    // A second context with a runner: a fresh reading of /metrics reads each context with calls of
    // its own on a cluster (on one Redis, one call reads up to 100).
    await stack().registerTestRunner(client, (await client.createContext()).id);
    expect((await fetch(`${stack().url}/metrics`)).status).toBe(200);

    // A runner down at first (503): its claims go back to their queue (settleWork).
    const refuse = path.join(stack().dir, "refuse");
    writeFileSync(refuse, "");
    const flaky = await stack().registerTestRunner(client, ctx, { REFUSE_FILE: refuse });
    await flaky.start();
    const pinned = await client.submitFlow(ctx, { start: true, jobs: [sh("pinned", { runner_id: flaky.id })] });
    await new Promise((r) => setTimeout(r, 1_500));
    rmSync(refuse);
    expect((await flowEnd(client, ctx, pinned.id)).status).toBe("finished");

    // What the API reaches only in a race: an actor undone (a concurrent registration of its key
    // won), mail put back on msg_out (a relay that could not settle it): the store's own calls.
    const store = new Store(stack().redis, stack().keys);
    const undone = await store.actors.create({ pubkey: (await generateKeyPair()).x, address: [] });
    await store.actors.delete({ id: undone.id });
    await store.flows.settle(
      ctx,
      { delivered: [], back: [stack().keys.message(ctx, admin().id, 999_999)] },
      Date.now(),
    );
    // The sweep's fold of a context's figure records, which it runs once 100 of them wait.
    await store.metrics.fold(ctx);

    // The sweep: retention's removals and the unread inbox, then a context deleted step by step.
    await new Promise((r) => setTimeout(r, 2_100));
    await stack().sweepToEnd();
    const doomed = (await client.createContext()).id;
    await stack().registerTestRunner(client, doomed);
    await client.deleteContext(doomed);
    await stack().sweepToEnd();
  });

  it("every script ran, and touched only the keys it was given", async () => {
    runs = monitor.stop();
    const names = await projectScripts();
    const { ran, undeclared } = await auditRuns(runs, names, cluster.live()[0] as number);
    console.log(`cluster: ${runs.length} script calls of ${ran.size} scripts watched on the masters`);
    expect([...names.values()].filter((name) => !ran.has(name)).sort()).toEqual([]);
    expect([...ran].filter((name) => ![...names.values()].includes(name))).toEqual([]);
    expect(undeclared).toEqual([]);
  });
});
