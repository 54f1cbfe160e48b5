import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { actorKeyId, generateKeyPair } from "../../shared/auth/index.js";
import { CoordinatorClient, signerFromJwk } from "../../shared/client/index.js";
import { freePort } from "../../infra/redis-server.js";
import { eventually } from "../support/eventually.js";
import { flowEnd } from "../support/flow-runs.js";
import { spawnRunner, writeKeyFile, type RunnerProcess } from "../support/runner-process.js";
import { startTestWorker, type TestWorker } from "../support/test-worker.js";

/**
 * The reference runner's batched fast path against a real `wrangler dev` Worker: a pull runner
 * leasing many jobs at once and sending its acks, starts and results through the batched webhook
 * (POST /v1/contexts/<c>/runners/<r>/reports), and a push runner batching its reports. Counted
 * from the Worker's own request counters (this file's Worker serves nobody else): every job runs
 * and is reported once, through fewer signed requests than reports, and no single webhook is used.
 */

const tmp = mkdtempSync(path.join(tmpdir(), "flow-runner-batch-"));
const runners: RunnerProcess[] = [];
let worker: TestWorker;
let admin: CoordinatorClient;

beforeAll(async () => {
  worker = await startTestWorker("runner-batch", tmp);
  const jwk = await generateKeyPair();
  const anonymous = new CoordinatorClient({ baseUrl: worker.url });
  const actor = await anonymous.registerActor(jwk);
  admin = anonymous.as(await signerFromJwk(jwk, actorKeyId(actor.id)));
});

afterAll(async () => {
  await Promise.all(runners.map((r) => r.kill()));
  await worker?.stop();
  rmSync(tmp, { recursive: true, force: true });
});

/** Requests this Worker answered, by route template (its isolate's counters). */
async function requestsByRoute(): Promise<Map<string, number>> {
  const text = await (await fetch(`${worker.url}/metrics`)).text();
  const counts = new Map<string, number>();
  for (const line of text.split("\n")) {
    const m = /^coordinator_isolate_http_requests_total\{method="POST",route="([^"]+)",status="(\d+)"\} (\d+)$/.exec(
      line,
    );
    if (!m) continue;
    const route = `${m[1]} ${m[2]}`;
    counts.set(route, (counts.get(route) ?? 0) + Number(m[3]));
  }
  return counts;
}

/** What was answered between two readings, summed over routes matching `pattern`. */
function delta(before: Map<string, number>, after: Map<string, number>, pattern: RegExp): number {
  let sum = 0;
  for (const [route, n] of after) if (pattern.test(route)) sum += n - (before.get(route) ?? 0);
  return sum;
}

const REPORTS = /\/runners\/:runnerId\/reports 200$/;
const WEBHOOKS = /\/jobs\/:(jobId|callerId\/:jobId)\/(ack|started|heartbeat|result|logs) /;
const LEASES = /\/runners\/:runnerId\/lease 200$/;

/**
 * A reference runner of sh jobs registered with `concurrency` (and `deliveries_per_post`), started
 * with `args`, ready.
 */
async function startRunner(contextId: number, mode: "push" | "pull", concurrency: number, args: string[], perPost = 1) {
  const jwk = await generateKeyPair();
  const port = mode === "push" ? await freePort() : 0;
  const runner = await admin.createRunner(contextId, {
    pubkey: jwk.x,
    runner_type: "sh",
    script_types: ["sh"],
    concurrency,
    deliveries_per_post: perPost,
    ...(mode === "push" ? { address: `http://127.0.0.1:${port}/` } : { local: true }),
  });
  const keyFile = writeKeyFile(tmp, contextId, runner.id, jwk);
  const proc = spawnRunner([
    ...["--url", worker.url, "--context", String(contextId), "--runner", String(runner.id)],
    ...["--key-file", keyFile, "--work-dir", path.join(tmp, `work-${runner.id}`), "--script-types", "sh"],
    ...(args.includes("--concurrency") ? [] : ["--concurrency", String(concurrency)]),
    ...(mode === "push" ? ["--listen", `127.0.0.1:${port}`] : ["--pull"]),
    ...args,
  ]);
  runners.push(proc);
  await proc.waitForLine(mode === "push" ? /listening on / : /pulling from /, 30_000);
  return proc;
}

const jobs = (n: number) =>
  Array.from({ length: n }, (_, i) => ({
    name: `j${i}`,
    script_type: "sh" as const,
    script: 'echo v=$JOB_ID > "$RESULT_FILE"\n',
  }));

describe("the reference runner, batching", () => {
  it("runs a 200-job flow pulled 50 at a time, each job once, reports in batches", async () => {
    const { id: contextId } = await admin.createContext();
    // `started` for every job, however quick: the count of reports is then exact.
    const proc = await startRunner(contextId, "pull", 100, ["--batch", "50", "--started-after", "0"]);
    const before = await requestsByRoute();
    const flow = await admin.submitFlow(contextId, { start: true, jobs: jobs(200) });
    const ended = await flowEnd(admin, contextId, flow.id, 120_000);
    expect(ended.status).toBe("finished");
    expect(ended.jobs.every((j) => j.status === "finished" && j.attempt === 1)).toBe(true);
    // The runner logs a job's end once its result was answered: wait for all 200.
    await waitForCount(proc, / end: finished /g, 200);
    expect(proc.stdout().match(/ start$/gm)).toHaveLength(200);
    expect(proc.stderr()).toBe("");

    const after = await requestsByRoute();
    const batches = delta(before, after, REPORTS);
    const leases = delta(before, after, LEASES);
    const reports = 3 * 200; // ack, started and result of each job
    console.log(
      `200 jobs pulled: ${leases} leases, ${batches} batches for ${reports} reports, ${((leases + batches) / 200).toFixed(2)} signed requests per job`,
    );
    expect(delta(before, after, WEBHOOKS)).toBe(0);
    expect(batches).toBeGreaterThan(0);
    expect(batches).toBeLessThan(reports);
    // The runner's own count, once drained: every report sent once, in the batches the Worker answered.
    proc.child.kill("SIGTERM");
    const drained = await proc.waitForLine(/drained \(\d+ reports sent in \d+ batches\)/);
    expect(drained).toMatch(new RegExp(`\\(${reports} reports sent in ${batches} batches\\)`));
  });

  it("reports only the result of a job that ended at once (the fast path), and `started` of one still running", async () => {
    const { id: contextId } = await admin.createContext();
    // 5 s: no quick job here takes that long, however busy the machine. One webhook per report
    // (`--batch 1`), so each report is a request of its route, counted below.
    const proc = await startRunner(contextId, "push", 20, ["--started-after", "5000", "--batch", "1"]);
    const before = await requestsByRoute();
    const slow = { name: "slow", script_type: "sh" as const, script: 'sleep 6\necho v=1 > "$RESULT_FILE"\n' };
    const flow = await admin.submitFlow(contextId, { start: true, jobs: [...jobs(20), slow] });
    const ended = await flowEnd(admin, contextId, flow.id, 120_000);
    expect(ended.jobs.map((j) => j.status)).toEqual(ended.jobs.map(() => "finished"));
    await waitForCount(proc, / end: finished /g, 21);
    const after = await requestsByRoute();
    expect(delta(before, after, /\/jobs\/:jobId\/result 200$/)).toBe(21);
    expect(delta(before, after, /\/jobs\/:jobId\/started 200$/)).toBe(1); // the slow one's
  });

  it("batches a push runner's reports unless told not to", async () => {
    const { id: contextId } = await admin.createContext();
    const proc = await startRunner(contextId, "push", 20, []);
    const before = await requestsByRoute();
    const flow = await admin.submitFlow(contextId, { start: true, jobs: jobs(40) });
    const ended = await flowEnd(admin, contextId, flow.id, 120_000);
    expect(ended.jobs.map((j) => j.status)).toEqual(ended.jobs.map(() => "finished"));
    await waitForCount(proc, / end: finished /g, 40);
    const after = await requestsByRoute();
    expect(delta(before, after, WEBHOOKS)).toBe(0);
    // Pushed jobs are acknowledged by the delivery's answer: a start and a result each.
    expect(delta(before, after, REPORTS)).toBeLessThan(2 * 40);
    // A job whose result is on its way holds no slot at the runner: the next push is never refused busy.
    const runner = (await admin.listRunners(contextId)).items[0];
    expect((await admin.loadRunner(contextId, runner?.id ?? 0)).dispatch.last_error).toBeUndefined();
  });

  it("takes several deliveries in one POST when registered to, each job once", async () => {
    const { id: contextId } = await admin.createContext();
    const proc = await startRunner(contextId, "push", 20, [], 10);
    const flow = await admin.submitFlow(contextId, { start: true, jobs: jobs(60) });
    const ended = await flowEnd(admin, contextId, flow.id, 120_000);
    expect(ended.jobs.every((j) => j.status === "finished" && j.attempt === 1)).toBe(true);
    await waitForCount(proc, / end: finished /g, 60);
    const posts = [...proc.stdout().matchAll(/a POST of (\d+) deliveries: (\d+) taken, (\d+) refused/g)];
    const batched = posts.reduce((sum, m) => sum + Number(m[1]), 0);
    const alone = (proc.stdout().match(/ start$/gm)?.length ?? 0) - batched;
    console.log(`60 jobs pushed: ${posts.length} POSTs of several deliveries (${batched} jobs), ${alone} alone`);
    // The first round claims 20 at once: they go in POSTs of at most 10.
    expect(posts.length).toBeGreaterThan(0);
    expect(posts.every((m) => Number(m[1]) <= 10 && Number(m[3]) === 0)).toBe(true);
    expect(proc.stdout().match(/ start$/gm)).toHaveLength(60); // each job started once
    expect(proc.stdout()).not.toMatch(/duplicate/);
    expect(proc.stderr()).toBe("");
  });

  it("answers deliveries with their jobs' results when they end in time, and reports a slower job's as before", async () => {
    const { id: contextId } = await admin.createContext();
    // One webhook per report (`--batch 1`): a result that went as a report is a request of its route.
    // A window well past a quick job's time even on a loaded machine (20 processes start at once).
    const proc = await startRunner(contextId, "push", 20, ["--answer-within", "2500", "--batch", "1"], 10);
    const before = await requestsByRoute();
    const slow = { name: "slow", script_type: "sh" as const, script: 'sleep 4\necho v=slow > "$RESULT_FILE"\n' };
    const flow = await admin.submitFlow(contextId, { start: true, jobs: [...jobs(30), slow] });
    const ended = await flowEnd(admin, contextId, flow.id, 120_000);
    expect(ended.jobs.every((j) => j.status === "finished" && j.attempt === 1)).toBe(true);
    expect(ended.jobs.find((j) => j.name === "j3")?.result).toEqual({ v: String(ended.jobs[3]?.id) });
    expect(ended.jobs.find((j) => j.name === "slow")?.result).toEqual({ v: "slow" });
    await waitForCount(proc, / end: finished /g, 31);
    const after = await requestsByRoute();
    expect(delta(before, after, /\/jobs\/:jobId\/result 200$/)).toBe(1); // the slow one's
    const told = [...proc.stdout().matchAll(/; (\d+) answered with their result$/gm)];
    expect(told.length).toBeGreaterThan(0);
    expect(proc.stdout().match(/ start$/gm)).toHaveLength(31);
    expect(proc.stderr()).toBe("");
  });

  it("puts back the deliveries of a POST that the runner refused one by one, and delivers them later", async () => {
    const { id: contextId } = await admin.createContext();
    // Registered for 10 at once, the runner takes 4: the rest of each POST is answered 429.
    const proc = await startRunner(contextId, "push", 10, ["--concurrency", "4"], 10);
    const flow = await admin.submitFlow(contextId, { start: true, jobs: jobs(12) });
    const ended = await flowEnd(admin, contextId, flow.id, 120_000);
    expect(ended.jobs.every((j) => j.status === "finished" && j.attempt === 1)).toBe(true);
    await waitForCount(proc, / end: finished /g, 12);
    const refused = [...proc.stdout().matchAll(/a POST of \d+ deliveries: \d+ taken, (\d+) refused/g)];
    expect(refused.some((m) => Number(m[1]) > 0)).toBe(true);
    expect(proc.stdout().match(/ start$/gm)).toHaveLength(12);
    expect(proc.stdout()).not.toMatch(/duplicate/);
  });
});

/** Waits until the runner printed `pattern` `count` times. */
async function waitForCount(proc: RunnerProcess, pattern: RegExp, count: number): Promise<void> {
  await eventually(
    () => ((proc.stdout().match(pattern)?.length ?? 0) >= count ? true : undefined),
    60_000,
    100,
    `${count} runner lines ${pattern}`,
  );
}
