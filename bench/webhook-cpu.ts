/**
 * `npm run bench:webhooks [-- --target serve] [--rounds N]`: what the Worker's workerd spends
 * per webhook, by difference. On one private stack, round after round, it runs 1,000 jobs one
 * delivery a POST three ways, each in a context of its own (`OurSystem.batchedThroughput`):
 *
 * - `readme`: the runner answers 200, then reports `started`, then its result (docs/runners.md);
 * - `single`: the same without `started` (the reference runner's path for a quick job);
 * - `inline`: the result in the answer to the delivery, no webhook at all.
 *
 * The workerd process's CPU over each run (`/proc`, 10 ms ticks; under `wrangler dev` without
 * its proxy, which is a process of its own) divided by the jobs gives each way's cost per job;
 * their differences, paired within a round, give a `started` webhook (readme − single) and what
 * a result webhook costs beyond a result in the answer (single − inline). Medians over the
 * rounds, with the min–max. Timings move with the machine's load; CPU per job less so.
 */
import { parseArgs } from "node:util";
import { startPrivateStack } from "../test/support/private-stack.js";
import { median } from "./figures.js";
import { RedisCounter } from "./measure.js";
import { OurSystem, type Batching } from "./ours.js";

const { values } = parseArgs({ options: { target: { type: "string" }, rounds: { type: "string" } } });
const target = values.target === "serve" ? "serve" : "wrangler";
const rounds = Math.max(1, Number(values.rounds ?? 3));
const WAYS = ["readme", "single", "inline"] as const satisfies readonly Batching[];
const JOBS = 1000;

const stack = await startPrivateStack("webhooks", { cron: false, target });
const stop = () => void stack.stop().finally(() => process.exit(2));
process.once("SIGINT", stop);
process.once("SIGTERM", stop);
/** Per way: workerd ms per job, and jobs/s, one entry per round. */
const cpu: Record<string, number[]> = {};
const rate: Record<string, number[]> = {};
try {
  const counter = await RedisCounter.open(stack.redisUrl);
  const ours = await OurSystem.start(stack, counter);
  for (let round = 1; round <= rounds; round++) {
    // The order turns each round: no way always finds the warmest (or busiest) machine.
    const order = WAYS.map((_, i) => WAYS[(i + round) % WAYS.length] as Batching);
    for (const way of order) {
      console.error(`[webhooks] round ${round}/${rounds}: ${way}`);
      const run = await ours.batchedThroughput(JOBS, way);
      (cpu[way] ??= []).push((run.cpu.workerd ?? NaN) / JOBS);
      (rate[way] ??= []).push(JOBS / (run.wallMs / 1000));
    }
  }
  ours.close();
  counter.close();
} finally {
  await stack.stop();
}

const spread = (xs: number[], digits = 2) =>
  `${median(xs).toFixed(digits)} (${Math.min(...xs).toFixed(digits)}–${Math.max(...xs).toFixed(digits)})`;
const paired = (a: string, b: string) => (cpu[a] ?? []).map((x, i) => x - (cpu[b]?.[i] ?? NaN));
console.log(`workerd CPU per job, ${target === "serve" ? "npm run serve" : "wrangler dev"}, ${rounds} round(s):`);
for (const way of WAYS)
  console.log(`  ${way.padEnd(7)} ${spread(cpu[way] ?? [])} ms/job, ${spread(rate[way] ?? [], 0)} jobs/s`);
console.log(`  a started webhook (readme − single): ${spread(paired("readme", "single"))} ms`);
console.log(
  `  a result webhook beyond a result in the answer (single − inline): ${spread(paired("single", "inline"))} ms`,
);
process.exit(0);
