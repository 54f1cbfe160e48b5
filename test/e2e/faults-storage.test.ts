import { writeFileSync } from "node:fs";
import http from "node:http";
import path from "node:path";
import { beforeAll, describe, expect, it } from "vitest";
import { actorKeyId, signRequest, type RequestSigner } from "../../shared/auth/index.js";
import { signerFromJwk } from "../../shared/client/index.js";
import { eventually } from "../support/eventually.js";
import { attemptsOf, flowEnd, runsIn } from "../support/flow-runs.js";
import { usePrivateStack } from "../support/use-private-stack.js";

// The Worker's storage going away under it, with real processes: the REST endpoint stopped (the
// storage is unreachable: connections refused) and redis-server frozen behind a running REST
// endpoint (SIGSTOP: requests hang until the storage deadline). The API answers 503 naming the
// cause, writes nothing half-way, runners' reports are retried until storage is back, and no job
// is lost or run twice. How long the answers took is printed, never asserted (the machines are
// shared); a request that hangs fails at its own generous deadline.

const { stack, admin } = usePrivateStack("faults-storage");
let signer: RequestSigner;

/** How long a request may take before the test calls it hung: far beyond the storage deadline (5 s). */
const HANG_MS = 30_000;

/** A 503's detail when the REST endpoint refuses connections (workerd calls that a lost connection). */
const REFUSED_DETAIL = /^storage is unreachable: Network connection lost\.$/;
/** A 503's detail when the storage deadline (REDIS_TIMEOUT_MS) passed without an answer. */
const DEADLINE_DETAIL = /^storage is unreachable: The operation was aborted due to timeout$/;

/** A problem document as the API answers it. */
interface ProblemBody {
  type?: string;
  status?: number;
  detail?: string;
}

// Runs after usePrivateStack's beforeAll, which registered first (vitest runs them in order).
beforeAll(async () => {
  signer = await signerFromJwk(admin().jwk, actorKeyId(admin().id));
});

/**
 * A signed POST by the admin, answered as it came (status, content type, body) and timed (for the
 * log); it fails if no answer came within HANG_MS.
 */
async function timedPost(
  pathname: string,
  body: unknown,
): Promise<{ status: number; type: string | null; body: ProblemBody; ms: number }> {
  const began = Date.now();
  const request = await signRequest(
    new Request(`${stack().url}${pathname}`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify(body),
    }),
    signer,
  );
  const res = await fetch(request, { signal: AbortSignal.timeout(HANG_MS) });
  const parsed = (await res.json()) as ProblemBody;
  return { status: res.status, type: res.headers.get("content-type"), body: parsed, ms: Date.now() - began };
}

/** GET /health, answered as it came and timed (for the log); it fails if no answer came within HANG_MS. */
async function timedHealth(): Promise<{ status: number; body: ProblemBody & { redis?: unknown }; ms: number }> {
  const began = Date.now();
  const res = await fetch(`${stack().url}/health`, { signal: AbortSignal.timeout(HANG_MS) });
  const parsed = (await res.json()) as ProblemBody & { redis?: unknown };
  return { status: res.status, body: parsed, ms: Date.now() - began };
}

async function flowIds(contextId: number): Promise<number[]> {
  return (await admin().client.listFlows(contextId)).items.map((f) => f.id);
}

/** The context's job and message records in Redis (a half-written flow would leave some). */
async function records(contextId: number): Promise<string[]> {
  const keys = await stack().redis.exec<string[]>(["KEYS", `${stack().keys.namespace(contextId)}*`]);
  return keys.filter((k) => /:(flow|job|message):/.test(k) || k.endsWith(":msg_out"));
}

const twoJobs = (id: number) => ({
  id,
  start: true,
  jobs: [
    { name: "a", script: "true", script_type: "sh" as const },
    { name: "b", script: "true", script_type: "sh" as const, depends: ["a"] },
  ],
});

/** Submits `body` as it is (it names its flow id) and checks the flow ran a then b, once each. */
async function submitAndRun(contextId: number, body: ReturnType<typeof twoJobs>, output: () => string): Promise<void> {
  const created = await admin().client.submitFlow(contextId, body);
  expect(created.id).toBe(body.id);
  const view = await flowEnd(admin().client, contextId, body.id);
  expect(view.status, JSON.stringify(view)).toBe("finished");
  expect(view.result).toEqual({ a: { job: "a", attempt: "1" }, b: { job: "b", attempt: "1" } });
  expect(view.jobs.map((j) => [j.key, j.status, j.attempt])).toEqual([
    ["a", "finished", 1],
    ["b", "finished", 1],
  ]);
  expect(attemptsOf(runsIn(output()), body.id)).toEqual({ a: [1], b: [1] });
}

describe("storage faults", () => {
  it("answers a submission 503 naming the lost connection while the REST endpoint is down, writes none of it, and takes it once it is back", async () => {
    const ctx = (await admin().client.createContext()).id;
    const runner = await stack().registerTestRunner(admin().client, ctx);
    const proc = await runner.start();
    const body = twoJobs(4242);

    await stack().stopRest();
    let refused: Awaited<ReturnType<typeof timedPost>>;
    try {
      refused = await timedPost(`/v1/contexts/${ctx}/flows`, body);
    } finally {
      await stack().restartRest();
    }
    expect(refused.status, JSON.stringify(refused.body)).toBe(503);
    expect(refused.type).toMatch(/^application\/problem\+json/);
    expect(refused.body).toMatchObject({ type: "/problems/storage-unavailable", status: 503 });
    expect(refused.body.detail).toMatch(REFUSED_DETAIL);
    console.log(
      `REST endpoint down: the submission was answered ${refused.status} in ${refused.ms} ms: ${refused.body.detail}`,
    );

    // Nothing of it was stored: no flow, no job, no message, nothing waiting to be sent.
    expect(await flowIds(ctx)).toEqual([]);
    await expect(admin().client.loadFlow(ctx, body.id)).rejects.toMatchObject({ status: 404, code: "not-found" });
    expect(await records(ctx)).toEqual([]);

    await submitAndRun(ctx, body, proc.output);
    expect(await flowIds(ctx)).toEqual([body.id]);
  });

  it("answers 503 naming the storage deadline while redis-server is frozen (SIGSTOP), and carries on after SIGCONT", async () => {
    const ctx = (await admin().client.createContext()).id;
    const runner = await stack().registerTestRunner(admin().client, ctx);
    const proc = await runner.start();
    const body = twoJobs(4343);

    stack().pauseRedis();
    let refused: Awaited<ReturnType<typeof timedPost>>;
    let health: Awaited<ReturnType<typeof timedHealth>>;
    try {
      [refused, health] = await Promise.all([timedPost(`/v1/contexts/${ctx}/flows`, body), timedHealth()]);
    } finally {
      stack().continueRedis();
    }
    console.log(
      `redis-server frozen: the submission was answered ${refused.status} in ${refused.ms} ms (${refused.body.detail}), /health ${health.status} in ${health.ms} ms (${health.body.detail})`,
    );
    expect(refused.status, JSON.stringify(refused.body)).toBe(503);
    expect(refused.type).toMatch(/^application\/problem\+json/);
    expect(refused.body).toMatchObject({ type: "/problems/storage-unavailable", status: 503 });
    expect(refused.body.detail).toMatch(DEADLINE_DETAIL);
    expect(health.status, JSON.stringify(health.body)).toBe(503);
    expect(health.body).toMatchObject({
      type: "/problems/storage-unavailable",
      status: 503,
      redis: { reachable: false },
    });
    expect(health.body.detail).toMatch(DEADLINE_DETAIL);

    // All is well again: healthy, the refused submission left nothing, and it now runs to its end.
    await eventually(async () => ((await fetch(`${stack().url}/health`)).status === 200 ? true : undefined), 10_000);
    expect(await flowIds(ctx)).toEqual([]);
    expect(await records(ctx)).toEqual([]);
    await submitAndRun(ctx, body, proc.output);
  });

  // The reference runner's two ways to report: in batches (its default), and one webhook per
  // report. Each retries a report answered 5xx with a growing backoff, within its own window.
  const retries = {
    batched: {
      args: [],
      twice: /report\(s\) not taken \(.*\); sending again in 500 ms/,
      first: /report\(s\) not taken \((a 5xx problem|.*503 storage-unavailable.*)\); sending again in 250 ms/,
    },
    "one by one": {
      args: ["--batch", "1"],
      twice: /POST \S+\/result failed \(5\d\d .*retrying in 500 ms/,
      first: /POST \S+\/result failed \(503 storage-unavailable.*retrying in 250 ms/,
    },
  };
  it.each(Object.keys(retries) as (keyof typeof retries)[])(
    "has a runner retry its result (%s) while the REST endpoint is down, and takes it once it is back: the job ran once",
    async (way) => {
      const ctx = (await admin().client.createContext()).id;
      const runner = await stack().registerReferenceRunner(admin().client, ctx, "push", retries[way].args);
      const proc = await runner.start();
      const go = path.join(stack().dir, `go-result-${way.replace(" ", "-")}`);
      const flow = await admin().client.submitFlow(ctx, {
        start: true,
        jobs: [
          {
            name: "held",
            script_type: "sh",
            timeout: 60,
            env_vars: { GO: go },
            script: 'while [ ! -e "$GO" ]; do sleep 0.1; done\necho n=6 > "$RESULT_FILE"\n',
          },
        ],
      });
      await eventually(
        async () => ((await admin().client.loadFlow(ctx, flow.id)).jobs[0]?.status === "started" ? true : undefined),
        20_000,
      );

      await stack().stopRest();
      try {
        writeFileSync(go, "");
        // Answered 5xx twice: retried with a growing backoff.
        await proc.waitForLine(retries[way].twice, 20_000);
      } finally {
        await stack().restartRest();
      }
      expect(proc.stderr()).toMatch(retries[way].first);

      const view = await flowEnd(admin().client, ctx, flow.id);
      expect(view.status, JSON.stringify(view)).toBe("finished");
      expect(view.result).toEqual({ held: { n: "6" } });
      expect(view.jobs[0]).toMatchObject({ status: "finished", attempt: 1, runner_id: runner.id });
      expect(attemptsOf(runsIn(proc.stdout()), flow.id)).toEqual({ held: [1] });
      await proc.waitForLine(/\(held, .*\) end: finished in [\d.]+ s$/, 20_000);
    },
  );

  it("delivers a job whose runner refused it (503) while storage was away, once storage is back", async () => {
    const ctx = (await admin().client.createContext()).id;
    const runner = await stack().registerTestRunner(admin().client, ctx);
    // The runner's port is first served by a gate that holds each delivery's answer.
    const held: http.ServerResponse[] = [];
    const gate = http.createServer((req, res) => {
      req.resume();
      req.on("end", () => held.push(res));
    });
    await new Promise<void>((resolve) => gate.listen(runner.port, "127.0.0.1", resolve));
    const flow = await admin().client.submitFlow(ctx, {
      start: true,
      timeouts: { timeout: 60 }, // the delivery deadline stays far off: no retry comes to the rescue
      jobs: [{ name: "bounced", script: "true", script_type: "sh" }],
    });
    const delivery = await eventually(async () => held[0], 20_000);

    // Redis goes away behind the REST endpoint while the delivery is in flight.
    const slots = stack().keys.runnerSlots(ctx, runner.id);
    await stack().refuseStorage();
    try {
      delivery.writeHead(503).end(); // busy: the dispatcher must put the attempt back in its queue
      // Storage stays away until the dispatcher tried to settle (a few times) and kept the
      // settlement for its next round.
      await eventually(
        () =>
          stack()
            .storageRequests()
            .filter((body) => body.includes(slots)).length >= 3
            ? true
            : undefined,
        20_000,
        100,
        "the dispatcher settling",
      );
    } finally {
      await stack().restartRest();
      await new Promise<void>((resolve) => {
        gate.close(() => resolve());
        gate.closeAllConnections();
      });
    }
    const heldSlots = await stack().redis.exec<string[]>(["ZRANGE", slots, "0", "-1"]);
    const proc = await runner.start();
    // The dispatcher's alarm comes back soon by itself; the sweep only hurries it.
    expect((await stack().sweep()).status).toBe(200);

    const view = await flowEnd(admin().client, ctx, flow.id, 30_000).catch(async (error: Error) => {
      const now = await admin().client.loadFlow(ctx, flow.id);
      const said = stack()
        .workerLog()
        .split("\n")
        .filter((l) => l.includes(`context ${ctx}`));
      throw new Error(
        `${error.message}: the flow is ${JSON.stringify(now.jobs)}; slots then: ${JSON.stringify(heldSlots)}; the Worker said: ${said.join(" | ")}`,
      );
    });
    expect(view.status, JSON.stringify(view)).toBe("finished");
    expect(view.jobs[0]).toMatchObject({ status: "finished", attempt: 1, runner_id: runner.id });
    expect(attemptsOf(runsIn(proc.output()), flow.id)).toEqual({ bounced: [1] });
    // While storage was away the claim held its slot; now the slot is free again.
    expect(heldSlots).toHaveLength(1);
    expect(await stack().redis.exec<number>(["ZCARD", slots])).toBe(0);
  });
});
