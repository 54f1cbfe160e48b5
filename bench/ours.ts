import type { Readable } from "node:stream";
import type { PrivateStack, TestRunnerProcess } from "../test/support/private-stack.js";
import { ContextEnds } from "./context-ends.js";
import {
  cpuBetween,
  cpuSample,
  listenerPid,
  executedBetween,
  now,
  sleep,
  type CommandCount,
  type RedisCounter,
} from "./measure.js";
import { RunnerTap } from "./runner-tap.js";
import { chainJobs, independentJobs, layeredDag, loneJobs, treeJobs, type OurJob } from "./shapes.js";
import { STEPS, stepsOf, type LoneSample, type Step } from "./steps.js";

// This project's side: flows submitted through the Worker under `wrangler dev` or `npm run serve` (signed, as any
// client submits them), delivered to the trivial push runner test/support/test-runner.ts, which
// behaves as docs/runners.md, "Writing a runner", teaches: it answers each delivery 200, then
// sends a signed `started` report and a signed result report, one webhook POST each (the
// headline rows). The runner's stdout says when each job began (`delivery <epoch ms>`, printed
// as the delivery arrives) and when each result was applied (its `answered result … 200
// applied` line, timed as it reaches the benchmark).

/** How many deliveries the runner may hold at once; BullMQ's worker gets the same concurrency. */
export const CONCURRENCY = 50;

/** What one counted run of a shape cost. */
export interface ShapeCost {
  jobs: number;
  /** Commands redis-server executed (script internals included), between two quiet points. */
  executed: CommandCount;
  /** Commands sent to redis-server (one EVALSHA = 1): by the REST endpoint here, by ioredis for BullMQ. */
  sent: number;
  /** HTTP requests the REST endpoint got (this project only): storage round trips. */
  requests?: number;
  /** Submit → the last result applied, ms. */
  wallMs: number;
  /** CPU ms by process over the same span, with `total`. */
  cpu: Record<string, number>;
}

/** How a batched run's runner takes its jobs (`Ours.batchedThroughput`). */
export type Batching = "pull" | "push" | "posts" | "answers" | "single" | "readme" | "inline";

/** Every Batching, for the command line (`--profile-shape`). */
export const BATCHINGS = [
  "push",
  "posts",
  "answers",
  "pull",
  "single",
  "readme",
  "inline",
] as const satisfies readonly Batching[];

/**
 * How a runner tells a job's result: `reported` through the result webhook after a `started`
 * report, as docs/runners.md teaches (the runner's `answered result … 200 applied` line says
 * when it was applied), `result-only` through the result webhook alone (FAST: no `started`, as
 * the reference runner does for a job that ends at once), `answered` in its answer to the
 * delivery (INLINE: the flow's end on the context's stream says when).
 */
export type Telling = "reported" | "result-only" | "answered";

/** A context of the benchmark's with its own test runner, and where its results are seen applied. */
interface Side {
  contextId: number;
  runner: TestRunnerProcess;
  tap: RunnerTap;
  /** For a runner that answers with results: the flows' ends. */
  ends?: ContextEnds;
}

/** Lone-job timings: submit → start at the runner, submit → result applied, ms per sample. */
export interface LoneTimings {
  start: number[];
  applied: number[];
  /** CPU ms per job over the whole series, every process. */
  cpuPerJob: number;
  /** Where the time goes (this project only): ms per sample, by step (see STEPS). */
  steps?: Record<Step, number[]>;
}

/** This project on a private stack: a context, its push runner, and an idle context for the sweep. */
export class OurSystem {
  private constructor(
    private readonly stack: PrivateStack,
    private readonly client: Awaited<ReturnType<PrivateStack["newActor"]>>["client"],
    private readonly sides: Record<Telling, Side>,
    private readonly counter: RedisCounter,
    /** wrangler dev's proxy in front of the Worker: its CPU is told apart. */
    private readonly proxyPid: number | undefined,
  ) {}

  static async start(stack: PrivateStack, counter: RedisCounter): Promise<OurSystem> {
    const admin = await stack.newActor();
    const side = async (env: Record<string, string>, answers: boolean): Promise<Side> => {
      const ctx = await admin.client.createContext();
      const registered = await stack.registerTestRunner(admin.client, ctx.id, env, CONCURRENCY);
      const runner = await registered.start();
      const tap = new RunnerTap(runner.child.stdout as Readable);
      return { contextId: ctx.id, runner, tap, ...(answers ? { ends: new ContextEnds(admin.client, ctx.id) } : {}) };
    };
    // FAST: only the result is reported, as the reference runner does for a job that ends at once.
    const sides = {
      reported: await side({ TIMES: "1" }, false),
      "result-only": await side({ TIMES: "1", FAST: "1" }, false),
      answered: await side({ TIMES: "1", INLINE: "1" }, true),
    };
    // Under serve, what listens on the Worker's port is its own workerd: there is no proxy.
    const proxy = stack.target === "serve" ? undefined : listenerPid(Number(new URL(stack.url).port));
    return new OurSystem(stack, admin.client, sides, counter, proxy);
  }

  /** Result reports that were not applied at first try (they are retried; shown as a warning). */
  get anomalies(): readonly string[] {
    return [...this.sides.reported.tap.anomalies, ...this.sides["result-only"].tap.anomalies];
  }

  private cpu(side = this.sides.reported) {
    return cpuSample(side.runner.child.pid, this.proxyPid);
  }

  private async submit(jobs: OurJob[], side = this.sides.reported): Promise<number> {
    const flow = await this.client.submitFlow(side.contextId, { start: true, jobs });
    return flow.id;
  }

  /** Runs `jobs` as one flow and waits for every result to be applied. */
  private async runFlow(
    jobs: OurJob[],
    side = this.sides.reported,
    timeoutMs = 300_000,
  ): Promise<{ t0: number; flow: number; end: number }> {
    const t0 = now();
    const flow = await this.submit(jobs, side);
    const end = await (side.ends?.endOf(flow, timeoutMs) ?? side.tap.resultsOf(flow, jobs.length, timeoutMs));
    return { t0, flow, end };
  }

  /** Runs a few flows first: loading scripts, keys and isolates is not what is measured. */
  async warmUp(): Promise<void> {
    for (const side of Object.values(this.sides)) {
      for (let i = 0; i < 3; i++) await this.runFlow(loneJobs("w"), side);
      await this.runFlow(independentJobs("w", 100), side);
      await this.runFlow(chainJobs("w", 3), side);
    }
  }

  /** Stops following the contexts' streams. */
  close(): void {
    for (const side of Object.values(this.sides)) side.ends?.close();
  }

  /** One flow of `jobs`, counted: quiet before, submit, every result applied, quiet after. */
  async cost(jobs: OurJob[]): Promise<ShapeCost> {
    const before = await this.counter.quiet();
    const sentBefore = this.stack.restSent();
    const cpuBefore = this.cpu();
    const { t0, end } = await this.runFlow(jobs);
    const cpu = cpuBetween(cpuBefore, this.cpu());
    const after = await this.counter.quiet();
    const sentAfter = this.stack.restSent();
    return {
      jobs: jobs.length,
      executed: executedBetween(before, after),
      sent: sentAfter.commands - sentBefore.commands,
      requests: sentAfter.requests - sentBefore.requests,
      wallMs: end - t0,
      cpu,
    };
  }

  lone = () => this.cost(loneJobs("l"));
  independent = (n: number) => this.cost(independentJobs("i", n));
  tree = (n: number) => this.cost(treeJobs("t", n));
  dag = () => this.cost(layeredDag("d"));

  /** `samples` lone jobs one after another: when each began at the runner, and was applied. */
  async loneTimings(samples: number, telling: Telling = "reported"): Promise<LoneTimings> {
    const side = this.sides[telling];
    await this.counter.quiet();
    const start: number[] = [];
    const applied: number[] = [];
    const sent: (LoneSample & { flow: number })[] = [];
    const cpuBefore = this.cpu(side);
    for (let i = 0; i < samples; i++) {
      // The runner stamps deliveries with its Date.now(): the start is compared with the same clock.
      const wallClock = Date.now();
      const { t0, flow, end } = await this.runFlow(loneJobs("s"), side, 30_000);
      applied.push(end - t0);
      const began = side.tap.startOf(flow, "s0");
      if (began !== undefined) {
        start.push(began - wallClock);
        sent.push({ flow, submitted: wallClock, began, answered: wallClock + (end - t0) });
      }
      await sleep(20);
    }
    const cpu = cpuBetween(cpuBefore, this.cpu(side));
    const cpuPerJob = (cpu.total ?? 0) / samples;
    // The steps follow a result reported through its webhook (steps 4 and 5).
    if (telling === "answered") return { start, applied, cpuPerJob };
    // Read after the series, so that reading costs nothing while it is timed.
    const steps = Object.fromEntries(STEPS.map((step) => [step, [] as number[]])) as Record<Step, number[]>;
    for (const sample of sent) {
      const times = stepsOf(sample, await this.eventTimes(side.contextId, sample.flow));
      if (times) for (const step of STEPS) steps[step].push(times[step]);
    }
    return { start, applied, cpuPerJob, steps };
  }

  /** When each kind of event of a finished lone flow happened first (its `at_ms`), from its stream. */
  private async eventTimes(contextId: number, flow: number): Promise<Partial<Record<string, number>>> {
    const at: Partial<Record<string, number>> = {};
    const signal = AbortSignal.timeout(10_000);
    for await (const event of this.client.flowEvents(contextId, flow, { signal })) {
      at[event.type] ??= event.at_ms;
      if (event.type === "flow.finished" || event.type === "flow.error") break;
    }
    return at;
  }

  /** `samples` chains of `length` jobs one after another: submit → the last job's result applied, ms. */
  async chainTimings(samples: number, length: number, telling: Telling = "reported"): Promise<number[]> {
    await this.counter.quiet();
    const times: number[] = [];
    for (let i = 0; i < samples; i++) {
      const { t0, end } = await this.runFlow(chainJobs("c", length), this.sides[telling], 60_000);
      times.push(end - t0);
      await sleep(20);
    }
    return times;
  }

  /**
   * Throughput of `n` independent jobs with batching, in a context of its own served by a runner
   * started for this run only. `pull`: it leases up to 50 jobs at a time and reports in batches
   * (an ack and a result per job, up to 100 reports a request). `push`: deliveries come one per
   * POST, as to any push runner, and results go in batches (up to 100 a request, two on the way,
   * those of one turn of its event loop together), as the reference runner's `--batch` sends them. `posts`: the same, the
   * runner registered to take up to 50 deliveries in one POST. `answers`: 50 a POST, each answered
   * with its result (signed by the runner), no webhook at all; the runner cannot tell when a result
   * was applied, so the end is the flow's `flow.finished` event as the benchmark reads it from
   * the context's stream (a little after the last commit, never before). `single`: one delivery
   * a POST and the result alone in its own webhook (no `started`), the reference runner's path
   * for a job that ends at once without `--batch`; `readme`: the same after a `started` report,
   * as the headline rows' runner; `inline`: one delivery a POST, answered with its result (the
   * last two for `--profile-shape`). The runner runs only
   * while the jobs are measured (a pull runner polls while idle): the counts run from quiet
   * before its start to quiet after its stop, so they include its polls.
   */
  async batchedThroughput(n: number, how: Batching): Promise<ShapeCost> {
    const ctx = await this.client.createContext();
    const runnerEnv = {
      pull: { TIMES: "1", PULL: "50" },
      push: { TIMES: "1", FAST: "1", BATCH_RESULTS: "1" },
      posts: { TIMES: "1", FAST: "1", BATCH_RESULTS: "1", DELIVERIES_PER_POST: "50" },
      answers: { TIMES: "1", INLINE: "1", DELIVERIES_PER_POST: "50" },
      single: { TIMES: "1", FAST: "1" },
      readme: { TIMES: "1" },
      inline: { TIMES: "1", INLINE: "1" },
    };
    const ends = how === "answers" || how === "inline" ? new ContextEnds(this.client, ctx.id) : undefined;
    /** When all `jobs` of `flow` were applied, as the runner's answers tell, or the context's stream. */
    const allApplied = (tap: RunnerTap, flow: number, jobs: number, timeoutMs: number) =>
      ends?.endOf(flow, timeoutMs) ?? tap.resultsOf(flow, jobs, timeoutMs);
    const registered = await this.stack.registerTestRunner(this.client, ctx.id, runnerEnv[how], CONCURRENCY);
    // A first flow warms the new context's objects up, as warmUp does for the main one. The
    // runner then stops: an idle pull runner's polls (2 commands each) keep Redis from going quiet.
    const warming = await registered.start();
    try {
      const warm = await this.client.submitFlow(ctx.id, { start: true, jobs: independentJobs("w", 100) });
      await allApplied(new RunnerTap(warming.child.stdout as Readable), warm.id, 100, 120_000);
    } finally {
      await warming.kill();
    }
    const before = await this.counter.quiet();
    const sentBefore = this.stack.restSent();
    const runner = await registered.start();
    const tap = new RunnerTap(runner.child.stdout as Readable);
    try {
      const cpuBefore = cpuSample(runner.child.pid, this.proxyPid);
      const t0 = now();
      const flow = await this.client.submitFlow(ctx.id, { start: true, jobs: independentJobs("b", n) });
      const end = await allApplied(tap, flow.id, n, 300_000);
      const cpu = cpuBetween(cpuBefore, cpuSample(runner.child.pid, this.proxyPid));
      await runner.kill();
      const after = await this.counter.quiet();
      const sentAfter = this.stack.restSent();
      this.sides.reported.tap.anomalies.push(...tap.anomalies);
      return {
        jobs: n,
        executed: executedBetween(before, after),
        sent: sentAfter.commands - sentBefore.commands,
        requests: sentAfter.requests - sentBefore.requests,
        wallMs: end - t0,
        cpu,
      };
    } finally {
      ends?.close();
      await runner.kill();
    }
  }

  /**
   * The idle cost with `waiting` jobs waiting (a paused context holds a flow of them): `sweep`,
   * one supervisor sweep counted alone (the cron fires it once a minute; it is off in this stack
   * so that nothing else fires it), and `background`, everything else over `windowMs` of rest.
   */
  async idle(windowMs: number, waiting: number): Promise<{ sweep: ShapeCost; background: ShapeCost }> {
    const ctx = await this.client.createContext();
    // Registered, never started: with the context paused nothing is delivered to it.
    await this.stack.registerTestRunner(this.client, ctx.id, {}, CONCURRENCY);
    await this.client.setPaused(ctx.id, true);
    await this.client.submitFlow(ctx.id, { start: true, jobs: independentJobs("q", waiting) });
    await this.stack.sweep(); // a first sweep finds the new flow; the measured one is a steady one
    const sweep = await this.window(waiting, async () => {
      const swept = await this.stack.sweep();
      if (swept.status !== 200) throw new Error(`the sweep answered ${swept.status}: ${swept.text}`);
    });
    const background = await this.window(waiting, () => sleep(windowMs), false);
    return { sweep, background };
  }

  /** What `act` costs, from quiet to quiet (or to the moment it ends, without `quietAfter`). */
  private async window(jobs: number, act: () => Promise<void>, quietAfter = true): Promise<ShapeCost> {
    const before = await this.counter.quiet();
    const sentBefore = this.stack.restSent();
    const cpuBefore = this.cpu();
    const t0 = now();
    await act();
    const wallMs = now() - t0;
    const cpu = cpuBetween(cpuBefore, this.cpu());
    const after = quietAfter ? await this.counter.quiet() : await this.counter.read();
    const sentAfter = this.stack.restSent();
    return {
      jobs,
      executed: executedBetween(before, after),
      sent: sentAfter.commands - sentBefore.commands,
      requests: sentAfter.requests - sentBefore.requests,
      wallMs,
      cpu,
    };
  }
}
