import { describe, expect, inject, it } from "vitest";
import type { TestRunnerProcess } from "../support/private-stack.js";
import { answersIn, flowEnd } from "../support/flow-runs.js";
import { layeredJobs } from "../support/jobs.js";
import { RedisCluster } from "../support/redis-cluster.js";
import { usePrivateStack } from "../support/use-private-stack.js";
import { quietSent } from "../support/quiet-sent.js";

// Flows end to end over a Redis Cluster (the Worker, the REST endpoint in front of the cluster),
// and what they cost there, counted as the single server's budgets are (budget-sent.test.ts,
// flow-delivery.test.ts, sweep-scale.test.ts), for docs/deploy.md's comparison. What differs on
// a cluster: a flow's start writes the sweep's due set in a command of its own, the key epoch is
// read with two GETs, a context's sweep settles in three round trips (keys.ts, `cluster`).

const cluster = RedisCluster.attach(inject("redisCluster"));
const { stack, admin } = usePrivateStack("cluster-flows", { cluster: { seeds: cluster.seeds }, cron: false });

/** The budgets on a cluster: the single server's, plus what the cluster's own commands add. */
const LONE_JOB_SENT = 4;
const INDEPENDENT_SENT_PER_JOB = 0.2;
const LAYERED_RUN_PER_JOB = 5;
const SWEEP_SENT_PER_CONTEXT = 7;

/** The commands the REST endpoint sent, once nothing more goes out for a while. */
const quiet = (idleMs = 600) => quietSent(stack(), idleMs);

/** A request of the key epoch's read: GET + GET, made at most once a second whatever the work. */
const epochRead = (commands: string[]) => commands.join("+") === "GET+GET";

/** The requests `work` made of storage, once quiet, less the key epoch's reads (GET + GET, at most once a second). */
async function sentBy(work: () => Promise<unknown>): Promise<{ sent: number; epochReads: number; requests: string[] }> {
  await quiet();
  const record = stack().restRecord();
  await work();
  await quiet();
  const recorded = record();
  const epochReads = recorded.filter(epochRead).length;
  const sent = recorded.filter((r) => !epochRead(r)).reduce((n, r) => n + r.length, 0);
  return { sent, epochReads, requests: recorded.map((commands) => commands.join("+")) };
}

/**
 * Commands the masters ran (INFO commandstats summed over them, scripts' own commands included),
 * by command. `info` is this count's own.
 */
async function commandsRun(): Promise<Map<string, number>> {
  const total = new Map<string, number>();
  for (const port of await cluster.masters()) {
    const text = String(await cluster.call(port, "INFO", "commandstats"));
    for (const m of text.matchAll(/^cmdstat_(\S+?):calls=(\d+)/gm))
      if (m[1] !== "info") total.set(m[1] as string, (total.get(m[1] as string) ?? 0) + Number(m[2]));
  }
  return total;
}

/** What ran between two readings of commandsRun, by command (those that ran). */
function ranBetween(before: Map<string, number>, after: Map<string, number>): Record<string, number> {
  const ran: Record<string, number> = {};
  for (const [name, calls] of after) if (calls > (before.get(name) ?? 0)) ran[name] = calls - (before.get(name) ?? 0);
  return ran;
}

describe("flows over a Redis Cluster", () => {
  let ctx: number;
  let proc: TestRunnerProcess;

  it("runs a diamond to its end, and a sweep over it", async () => {
    ctx = (await admin().client.createContext()).id;
    proc = await (await stack().registerTestRunner(admin().client, ctx)).start();
    const flow = await admin().client.submitFlow(ctx, {
      start: true,
      jobs: [
        { name: "a", script: "true", script_type: "sh" },
        { name: "b", script: "true", script_type: "sh", depends: ["a"] },
        { name: "c", script: "true", script_type: "sh", depends: ["a"] },
        { name: "d", script: "true", script_type: "sh", depends: ["b", "c"] },
      ],
    });
    expect((await flowEnd(admin().client, ctx, flow.id)).status).toBe("finished");
    await answersIn(proc, "answered result", 4);
    await stack().sweepToEnd();
  });

  it(`runs a lone job with at most ${LONE_JOB_SENT} commands sent, and the key epoch's reads`, async () => {
    const counts: number[] = [];
    let last: string[] = [];
    for (let i = 0; i < 3; i++) {
      const { sent, epochReads, requests } = await sentBy(async () => {
        const flow = await admin().client.submitFlow(ctx, {
          start: true,
          jobs: [{ name: `lone${i}`, script: "true", script_type: "sh" }],
        });
        await answersIn(proc, new RegExp(`^answered result lone${i} flow ${flow.id} .* 200 applied$`), 1);
      });
      counts.push(sent);
      last = requests;
      expect(epochReads).toBeLessThanOrEqual(2);
    }
    console.log(
      `cluster budget: a lone job sent ${counts.join(", ")} commands besides the key epoch's (limit ${LONE_JOB_SENT}): ${last.join(", ")}`,
    );
    for (const n of counts) expect(n).toBeLessThanOrEqual(LONE_JOB_SENT);
  });

  it(`runs 100 independent jobs with at most ${INDEPENDENT_SENT_PER_JOB} commands sent per job`, async () => {
    const { sent } = await sentBy(async () => {
      const jobs = Array.from({ length: 100 }, (_, i) => ({
        name: `i${i}`,
        script: "true",
        script_type: "sh" as const,
      }));
      const flow = await admin().client.submitFlow(ctx, { start: true, jobs });
      await answersIn(proc, new RegExp(`^answered result \\S+ flow ${flow.id} `), 100, 90_000);
    });
    console.log(`cluster budget: 100 independent jobs sent ${sent} commands = ${(sent / 100).toFixed(2)} per job`);
    expect(sent / 100).toBeLessThanOrEqual(INDEPENDENT_SENT_PER_JOB);
  });

  it(`runs a 100-job layered DAG with at most ${LAYERED_RUN_PER_JOB} commands run per job`, async () => {
    await quiet();
    const before = await commandsRun();
    const record = stack().restRecord();
    const flow = await admin().client.submitFlow(ctx, { start: true, jobs: layeredJobs("j", 10, 10) });
    expect((await flowEnd(admin().client, ctx, flow.id, 90_000)).status).toBe("finished");
    await quiet();
    const ran = ranBetween(before, await commandsRun());
    // Not the work's: the key epoch's reads (GET + GET at most once a second, so as many as the
    // flow took seconds), the replicas' REPLCONF ACK (one a second each), and the cluster client's
    // own topology queries (CLUSTER NODES): all grow with the run's time, and a loaded machine's
    // slower run passed 5 a job on them (5.05 and 5.07 in CI).
    const epochGets = 2 * record().filter(epochRead).length;
    const work = Object.entries(ran).reduce(
      (n, [name, calls]) => (/^(cluster|replconf)/.test(name) ? n : n + calls),
      0,
    );
    const run = work - epochGets;
    console.log(
      `cluster budget: a 100-job layered DAG ran ${run} commands on the masters = ${(run / 100).toFixed(2)} per job ` +
        `(besides ${epochGets} GETs of the key epoch): ${JSON.stringify(ran)}`,
    );
    expect(run / 100).toBeLessThanOrEqual(LAYERED_RUN_PER_JOB);
  });

  it(`sweeps due contexts with nothing to do at ${SWEEP_SENT_PER_CONTEXT} commands each at most`, async () => {
    const contexts: number[] = [];
    for (let i = 0; i < 20; i++) contexts.push((await admin().client.createContext()).id);
    const due = async () => {
      for (const c of contexts) await stack().redis.zadd(stack().keys.sweepDue(), { score: 0, member: String(c) });
    };
    // Warm-up: the sweep's scripts loaded on every master (20 sweeps at once would each find a
    // script missing and send it whole).
    await due();
    expect(await stack().sweepToEnd()).toBe(20);
    await due();
    const { requests } = await sentBy(async () => expect(await stack().sweepToEnd()).toBe(20));
    // Less the test's own reads of the sweep's counters (HMGET, through the endpoint here).
    const sweep = requests.filter((r) => r !== "HMGET");
    const sent = sweep.reduce((n, r) => n + r.split("+").length, 0);
    const byRequest: Record<string, number> = {};
    for (const r of sweep) byRequest[r] = (byRequest[r] ?? 0) + 1;
    console.log(
      `cluster budget: 20 quiet due contexts swept with ${sent} commands = ${(sent / 20).toFixed(2)} a context, ` +
        `in ${sweep.length} requests: ${JSON.stringify(byRequest)}`,
    );
    expect(sent / 20).toBeLessThanOrEqual(SWEEP_SENT_PER_CONTEXT);
  });
});
