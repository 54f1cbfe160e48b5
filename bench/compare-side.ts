/**
 * One side of one round of `npm run bench -- --compare REF` (compare.ts), run as a process of
 * its own: a private stack of the source tree at BENCH_TREE (this one, or REF's worktree), built
 * by that tree's own stack and benchmark code, its warm-up, then lone jobs one at a time, one
 * flow of independent jobs, and 10-job chains with the results in the answers. Prints one line,
 * `COMPARE <json>` (a Side), and stops the stack.
 */
import { pathToFileURL } from "node:url";
import { percentile } from "./figures.js";

/** What one side measured in one round. */
export interface Side {
  /** Submit → start at the runner, p50 and p95 (ms). */
  startP50: number;
  startP95: number;
  /** Submit → result applied, p50 (ms). */
  appliedP50: number;
  /** CPU per lone job, every process of the stack (ms). */
  loneCpu: number;
  /** CPU per job of the Worker's workerd processes, one flow of independent jobs (ms). */
  bulkWorkerCpu: number;
  /** A 10-job chain with the results in the answers, submit → its end, p50 (ms). */
  chainP50: number;
}

/** Chains each side times per round. */
const CHAINS = 10;

const tree = process.env.BENCH_TREE;
const samples = Number(process.env.BENCH_SAMPLES);
const bulk = Number(process.env.BENCH_BULK);
if (!tree || !(samples > 0) || !(bulk > 0)) throw new Error("compare-side: BENCH_TREE, BENCH_SAMPLES, BENCH_BULK");

const from = (file: string) => import(pathToFileURL(`${tree}/${file}`).href);
const { startPrivateStack } = await from("test/support/private-stack.ts");
const { RedisCounter } = await from("bench/measure.ts");
const { OurSystem } = await from("bench/ours.ts");

const stack = await startPrivateStack("compare", { cron: false });
try {
  const ours = await OurSystem.start(stack, await RedisCounter.open(stack.redisUrl));
  await ours.warmUp();
  const lone = (await ours.loneTimings(samples)) as { start: number[]; applied: number[]; cpuPerJob: number };
  const flow = (await ours.independent(bulk)) as { cpu: Record<string, number> };
  const chains = (await ours.chainTimings(CHAINS, 10, "answered")) as number[];
  const side: Side = {
    startP50: percentile(lone.start, 50),
    startP95: percentile(lone.start, 95),
    appliedP50: percentile(lone.applied, 50),
    loneCpu: lone.cpuPerJob,
    bulkWorkerCpu: (flow.cpu.workerd ?? NaN) / bulk,
    chainP50: percentile(chains, 50),
  };
  ours.close();
  console.log(`COMPARE ${JSON.stringify(side)}`);
} finally {
  await stack.stop();
}
process.exit(0);
