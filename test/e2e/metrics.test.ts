import { createHash } from "node:crypto";
import { describe, expect, it } from "vitest";
import type { FlowFigures } from "../../shared/flow/figures.js";
import { Store } from "../../shared/store/index.js";
import { countSets, keepFigures, readContextFigures } from "../../shared/store/scripts/metrics.js";
import { eventually } from "../support/eventually.js";
import { flowEnd } from "../support/flow-runs.js";
import type { ExtraWorker } from "../support/private-stack.js";
import { usePrivateStack } from "../support/use-private-stack.js";
import { quietSent } from "../support/quiet-sent.js";

// /metrics tells the same figures whichever Worker process (and isolate) answers, since they all
// come from Redis: checked with two `wrangler dev` processes on one Redis. Also: what one scrape
// costs in commands sent to Redis (counted where they leave the REST endpoint), read afresh and
// answered from the reading kept in storage, and that figure records are folded exactly once
// however many scrapes race.

// No cron: a sweep in the middle of a count would be counted too. Every scrape of this process
// reads afresh (METRICS_CACHE_SECONDS 0); the freshness window is tested on processes of its own.
const { stack, admin } = usePrivateStack("metrics", { cron: false, vars: { METRICS_CACHE_SECONDS: "0" } });

/** The lines that differ between two readings of the same storage: the isolate's own, and when it was read. */
const ownLine = (line: string) =>
  line.includes("coordinator_isolate_") || line.includes("coordinator_metrics_taken_timestamp_seconds");

/** /metrics of a Worker process, without the series that are that isolate's own or that reading's time. */
async function globalFigures(url: string): Promise<string> {
  const res = await fetch(`${url}/metrics`);
  expect(res.status).toBe(200);
  return (await res.text())
    .split("\n")
    .filter((line) => !ownLine(line))
    .join("\n");
}

/** /metrics of a Worker process without the isolate's own series (the reading's time kept). */
async function globalFiguresWithTime(url: string): Promise<string> {
  const text = await (await fetch(`${url}/metrics`)).text();
  return text
    .split("\n")
    .filter((line) => !line.includes("coordinator_isolate_"))
    .join("\n");
}

/** The lines of a scrape that name no context or this one. */
function ownSeries(text: string, contextId: number): string {
  return text
    .split("\n")
    .filter((line) => !line.includes('context="') || line.includes(`context="${contextId}"`))
    .join("\n");
}

/** The value of one series in a scrape; undefined when it is not there. */
function valueOf(text: string, series: string): number | undefined {
  const line = text.split("\n").find((l) => l.startsWith(`${series} `));
  return line === undefined ? undefined : Number(line.slice(series.length + 1));
}

const pause = (ms: number) => new Promise((r) => setTimeout(r, ms));

const quiet = (idleMs = 400) => quietSent(stack(), idleMs);

const scriptNames = new Map(
  [readContextFigures, countSets, keepFigures].map((s) => [
    `EVALSHA ${createHash("sha1").update(s.source).digest("hex")}`,
    s.name,
  ]),
);

/**
 * A scrape's own command, by name (the metrics scripts named, the others by command alone), or
 * undefined for one the Worker sent meanwhile in the background: a reading touches only the
 * context index, the sweep's due set, the global counters and the metrics keys, and runs only the
 * metrics scripts. Earlier contexts' dispatchers reap and relay in the background (CI saw `EVAL`,
 * an `EVALSHA` and two `ZRANGE` there, and once a refresh counted 11 where the reading sent 9).
 */
function scrapeCommand(command: string): string | undefined {
  const script = scriptNames.get(command);
  if (script || command.startsWith("EVAL")) return script;
  const [name, key] = command.split(" ");
  const keys = stack().keys;
  const own = [keys.contextIndex(), keys.sweepDue(), keys.counters(), keys.metrics("kept"), keys.metrics("refresh")];
  return own.includes(key ?? "") ? name : undefined;
}

/**
 * Scrapes `urls` at once, counting the commands sent to Redis meanwhile for the scrape, by name
 * (see scrapeCommand); the others are logged. Counted from one record, up to a quiet second after
 * the answers: a reading keeps itself (keepFigures) after its answer.
 */
async function scrapeCost(...urls: string[]): Promise<{ sent: number; byCommand: Record<string, number> }> {
  await quiet();
  const record = stack().restRecord({ keys: true });
  const answers = await Promise.all(urls.map((url) => fetch(`${url}/metrics`)));
  for (const res of answers) expect(res.status).toBe(200);
  await Promise.all(answers.map((res) => res.text()));
  await quiet(1_000);
  const byCommand: Record<string, number> = {};
  const background: string[] = [];
  for (const command of record().flat()) {
    const name = scrapeCommand(command);
    if (name === undefined) background.push(command);
    else byCommand[name] = (byCommand[name] ?? 0) + 1;
  }
  if (background.length) console.log(`sent meanwhile in the background, not counted: ${background.join(", ")}`);
  const sent = Object.values(byCommand).reduce((a, b) => a + b, 0);
  return { sent, byCommand };
}

/** Adds contexts of one runner each until there are `n` (other tests' contexts included). */
async function contextsUpTo(n: number): Promise<void> {
  const have = Number(await stack().redis.exec(["ZCARD", stack().keys.contextIndex()]));
  for (let i = have; i < n; i++) {
    const ctx = await admin().client.createContext();
    await stack().registerTestRunner(admin().client, ctx.id);
  }
}

let second: ExtraWorker | undefined;
const secondWorker = async () => (second ??= await stack().startWorker());

/** Two more Worker processes whose scrapes answer from the kept reading for `seconds`. */
let cached: [ExtraWorker, ExtraWorker] | undefined;
const cachedWorkers = async (seconds: number) =>
  (cached ??= [
    await stack().startWorker({ METRICS_CACHE_SECONDS: String(seconds) }),
    await stack().startWorker({ METRICS_CACHE_SECONDS: String(seconds) }),
  ]);

describe("metrics: the same from every Worker process", () => {
  it("reads afresh at 4 commands sent with no context, 6 with some (a call of each script per 100 contexts)", async () => {
    // First, while the stack has no context at all.
    await fetch(`${stack().url}/metrics`);
    const idle = await scrapeCost(stack().url);
    console.log(`fresh scrape, no context: ${idle.sent} commands sent: ${JSON.stringify(idle.byCommand)}`);
    expect(idle.sent).toBe(4);

    await contextsUpTo(1);
    await fetch(`${stack().url}/metrics`); // loads the scripts into Redis (a first use sends each whole)
    const one = await scrapeCost(stack().url);
    console.log(`fresh scrape, 1 context of one runner: ${one.sent} commands sent: ${JSON.stringify(one.byCommand)}`);
    // Per 100 contexts: readContextFigures (each one's fold, counters, runners, a count per flow
    // status, deadlines and dead letters, inside Redis) and countSets (their runners' slots).
    expect(one.byCommand).toMatchObject({ readContextFigures: 1, countSets: 1 });
    expect(one.sent).toBe(4 + 2);

    await admin().client.createContext(); // no runner
    const two = await scrapeCost(stack().url);
    expect(two.byCommand).toMatchObject({ readContextFigures: 1, countSets: 1 });
    expect(two.sent).toBe(4 + 2);
  });

  it("answers from the kept reading within METRICS_CACHE_SECONDS at 1 command sent and reads afresh at 9, at 2 contexts as at 50", async () => {
    const window = 5;
    const [a, b] = await cachedWorkers(window);
    await fetch(`${a.url}/metrics`); // loads keepFigures into Redis (a first use sends it whole)
    const costs: number[] = [];
    const refreshCosts: number[] = [];
    // The first test's two contexts (one without a runner), then 48 more of one runner each.
    for (const contexts of [2, 50]) {
      await contextsUpTo(contexts);
      // A reading kept now (answered, or read afresh and kept), stale after the window but still
      // kept (for 3 windows): the next scrape reads afresh under `metrics:refresh` and keeps it.
      // Without it, 48 contexts made on a loaded machine took longer than the kept reading lives,
      // and a scrape with none kept reads afresh without claiming `metrics:refresh` (no SET NX: 8
      // commands, not 9, in CI).
      await fetch(`${a.url}/metrics`);
      await pause(window * 1000);
      const refresh = await scrapeCost(a.url);
      expect(refresh.byCommand).toMatchObject({ readContextFigures: 1, countSets: 1, keepFigures: 1 });
      refreshCosts.push(refresh.sent);
      const kept = await scrapeCost(b.url);
      console.log(
        `${contexts} contexts: reading afresh ${refresh.sent} commands sent, answering from the kept reading ` +
          `${kept.sent}: ${JSON.stringify(kept.byCommand)}`,
      );
      expect(kept.byCommand).toEqual({ GET: 1 });
      const size = Number(await stack().redis.exec(["STRLEN", stack().keys.metrics("kept")]));
      console.log(`the kept reading of ${contexts} contexts: ${size} bytes`);
      costs.push(kept.sent);
      // Both processes answer the same reading, its time included.
      const [fromA, fromB] = await Promise.all([a.url, b.url].map(globalFiguresWithTime));
      expect(fromB).toBe(fromA);
    }
    expect(costs).toEqual([1, 1]);
    // The stale reading's GET, the SET NX of `metrics:refresh`, the reading (4 + 2), keepFigures.
    expect(refreshCosts).toEqual([9, 9]);
  });

  it("reads afresh once a window, however many scrapes of two processes come once it passed", async () => {
    const window = 5;
    const [a, b] = await cachedWorkers(window);
    await fetch(`${a.url}/metrics`);
    await pause(window * 1000 + 100);
    // Eight scrapes at once on a stale reading: one takes `metrics:refresh` and reads afresh,
    // the others answer the kept reading.
    const race = await scrapeCost(...Array.from({ length: 8 }, (_, i) => (i % 2 ? b.url : a.url)));
    console.log(`8 scrapes of a stale reading: ${race.sent} commands sent: ${JSON.stringify(race.byCommand)}`);
    // One fresh reading: kept once, its contexts read in one call. Only the reading's own
    // commands are counted exactly: the window also holds what earlier tests' dispatchers do in
    // the background (their reaps' ZRANGE and scripts), which made exact counts of those flaky.
    expect(race.byCommand).toMatchObject({ GET: 8, keepFigures: 1 });
    expect(race.byCommand["readContextFigures"] ?? 0).toBeLessThanOrEqual(1);
    expect(race.byCommand["ZRANGE"]).toBeGreaterThanOrEqual(1);
    expect(race.byCommand["SET"]).toBeGreaterThanOrEqual(1);
  });

  it("answers byte-identical global figures from two Worker processes on one Redis", async () => {
    const b = await secondWorker();
    const ctx = await admin().client.createContext();
    const runner = await stack().registerTestRunner(admin().client, ctx.id, { FAIL: "bad" }, 4);
    await runner.start();
    const good = await admin().client.submitFlow(ctx.id, {
      start: true,
      jobs: ["a", "b", "c"].map((name) => ({ name, script: "true", script_type: "sh" as const })),
    });
    const failing = await admin().client.submitFlow(ctx.id, {
      start: true,
      jobs: [
        { name: "ok", script: "true", script_type: "sh" },
        { name: "bad", script: "false", script_type: "sh", retries: 1, depends: ["ok"] },
      ],
      timeouts: { retry_base_ms: 10, retry_cap_ms: 20 },
    });
    expect((await flowEnd(admin().client, ctx.id, good.id)).status).toBe("finished");
    expect((await flowEnd(admin().client, ctx.id, failing.id)).status).toBe("error");
    expect((await stack().sweep()).status).toBe(200);
    await stack().quietCommandStats();

    const fromA = await globalFigures(stack().url);
    const fromB = await globalFigures(b.url);
    expect(fromB).toBe(fromA);
    // A scrape changes nothing a second one would tell differently.
    expect(await globalFigures(stack().url)).toBe(fromA);

    const c = `context="${ctx.id}"`;
    expect(valueOf(fromA, `coordinator_flows{${c},status="finished"}`)).toBe(1);
    expect(valueOf(fromA, `coordinator_flows{${c},status="error"}`)).toBe(1);
    expect(valueOf(fromA, `coordinator_runner_in_flight{${c},runner="${runner.id}"}`)).toBe(0);
    expect(valueOf(fromA, `coordinator_jobs_in_flight{${c}}`)).toBe(0);
    expect(valueOf(fromA, `coordinator_jobs_waiting{${c}}`)).toBe(0);
    expect(valueOf(fromA, `coordinator_dead_letters{${c}}`)).toBe(1);
    expect(valueOf(fromA, "coordinator_sweeps_total")).toBeGreaterThanOrEqual(1);
    // Counted by the flows' ends (a figure record each): 4 jobs finished, 1 errored after a retry.
    expect(valueOf(fromA, `coordinator_jobs_total{${c},status="finished"}`)).toBe(4);
    expect(valueOf(fromA, `coordinator_jobs_total{${c},status="error"}`)).toBe(1);
    expect(valueOf(fromA, `coordinator_job_retries_total{${c}}`)).toBe(1);
    expect(valueOf(fromA, `coordinator_dispatch_latency_seconds_count{${c}}`)).toBe(5);
    expect(valueOf(fromA, `coordinator_job_duration_seconds_count{${c}}`)).toBe(5);

    // Each process's own series are there, and say so.
    const raw = await (await fetch(`${b.url}/metrics`)).text();
    expect(raw).toMatch(/^# HELP coordinator_isolate_http_requests_total .*this isolate/m);
    expect(raw).toMatch(
      /^coordinator_isolate_http_requests_total\{method="GET",route="\/metrics",status="200"\} \d+$/m,
    );
  });

  it("tells the work waiting and in flight while runners are the bottleneck", async () => {
    const ctx = await admin().client.createContext();
    // Concurrency 2, and the runner holds its reports until a third delivery that never comes.
    const runner = await stack().registerTestRunner(admin().client, ctx.id, { HOLD: "3" }, 2);
    await runner.start();
    const flow = await admin().client.submitFlow(ctx.id, {
      start: true,
      jobs: ["a", "b", "c", "d", "e"].map((name) => ({ name, script: "true", script_type: "sh" as const })),
    });
    const c = `context="${ctx.id}"`;
    // Asked of process A only: the second process has Durable Objects of its own, and its
    // Dispatcher of this context never saw the work (in production there is one per context).
    const text = await eventually(
      async () => {
        const t = await globalFigures(stack().url);
        return valueOf(t, `coordinator_jobs_in_flight{${c}}`) === 2 ? t : undefined;
      },
      30_000,
      100,
      "two attempts in flight",
    );
    expect(valueOf(text, `coordinator_runner_in_flight{${c},runner="${runner.id}"}`)).toBe(2);
    expect(valueOf(text, `coordinator_jobs_waiting{${c}}`)).toBe(3);
    expect(valueOf(text, `coordinator_flows{${c},status="started"}`)).toBe(1);
    await admin().client.cancelFlow(ctx.id, flow.id);
  });

  it("counts deliveries a runner refused, the same from both processes", async () => {
    const b = await secondWorker();
    const ctx = await admin().client.createContext();
    await stack().registerTestRunner(admin().client, ctx.id); // never started: nothing answers at its address
    const flow = await admin().client.submitFlow(ctx.id, {
      start: true,
      jobs: [{ name: "nobody", script: "true", script_type: "sh" }],
    });
    const series = `coordinator_deliveries_refused_total{context="${ctx.id}"}`;
    await eventually(
      async () => ((valueOf(await globalFigures(stack().url), series) ?? 0) >= 1 ? true : undefined),
      30_000,
      100,
      "a refused delivery counted",
    );
    await admin().client.cancelFlow(ctx.id, flow.id);
    const refused = valueOf(await globalFigures(stack().url), series);
    expect(valueOf(await globalFigures(b.url), series)).toBe(refused);
  });

  it("folds each figure record once, however many scrapes from both processes race", async () => {
    const b = await secondWorker();
    const ctx = await admin().client.createContext();
    const record: FlowFigures = {
      finished: 2,
      error: 1,
      stopped: 0,
      retries: 3,
      latency: [1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1],
      latency_ms: 400_020,
      duration: [0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0],
      duration_ms: 1_500,
    };
    // As the ends of 1,500 flows push them: more than one fold takes (1,000).
    const records = 1_500;
    const list = stack().keys.contextFigures(ctx.id);
    for (let i = 0; i < records; i += 500)
      await stack().redis.exec(["RPUSH", list, ...Array.from({ length: 500 }, () => JSON.stringify(record))]);

    // The sweep's fold (foldFigures, once 100 records wait) takes 1,000; the scrapes the rest.
    await new Store(stack().redis, stack().keys).metrics.fold(ctx.id);
    expect(await stack().redis.exec(["LLEN", list])).toBe(records - 1_000);
    await Promise.all(
      Array.from({ length: 8 }, (_, i) => fetch(`${i % 2 ? b.url : stack().url}/metrics`).then((r) => r.text())),
    );
    expect(await stack().redis.exec(["LLEN", list])).toBe(0);
    // Only this context's series and those of no context: an earlier test's context may still be
    // moving (its cancelled job's item, claimed after its runner's backoff, holds a slot until the
    // Dispatcher settles it gone), and would differ between two scrapes whoever answered them.
    const text = ownSeries(await globalFigures(b.url), ctx.id);
    expect(ownSeries(await globalFigures(stack().url), ctx.id)).toBe(text);
    const c = `context="${ctx.id}"`;
    expect(valueOf(text, `coordinator_jobs_total{${c},status="finished"}`)).toBe(2 * records);
    expect(valueOf(text, `coordinator_jobs_total{${c},status="error"}`)).toBe(records);
    expect(valueOf(text, `coordinator_job_retries_total{${c}}`)).toBe(3 * records);
    // Cumulative buckets: the first bucket (25 ms) holds one a record, the +Inf bucket two.
    expect(valueOf(text, `coordinator_dispatch_latency_seconds_bucket{${c},le="0.025"}`)).toBe(records);
    expect(valueOf(text, `coordinator_dispatch_latency_seconds_bucket{${c},le="300"}`)).toBe(records);
    expect(valueOf(text, `coordinator_dispatch_latency_seconds_bucket{${c},le="+Inf"}`)).toBe(2 * records);
    expect(valueOf(text, `coordinator_dispatch_latency_seconds_count{${c}}`)).toBe(2 * records);
    expect(valueOf(text, `coordinator_dispatch_latency_seconds_sum{${c}}`)).toBe((400_020 * records) / 1000);
    expect(valueOf(text, `coordinator_job_duration_seconds_bucket{${c},le="0.5"}`)).toBe(0);
    expect(valueOf(text, `coordinator_job_duration_seconds_bucket{${c},le="1"}`)).toBe(2 * records);
    expect(valueOf(text, `coordinator_job_duration_seconds_sum{${c}}`)).toBe((1_500 * records) / 1000);
  });
});
