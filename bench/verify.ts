import { spawn } from "node:child_process";
import type { BullSystem } from "./bullmq.js";
import { sleep, type RedisCounter } from "./measure.js";
import type { OurSystem, ShapeCost } from "./ours.js";

// `--check-counters`: the two counts of commands sent (the REST endpoint's for this project,
// ioredis's for BullMQ) checked against MONITOR, which shows every command a client sent apart
// from those a script ran (`[0 lua]`). MONITOR slows redis-server down, so it is never on while
// anything is timed: this check runs instead of the benchmark, not during it.

/** One shape counted both ways. */
export interface CounterCheck {
  who: string;
  shape: string;
  counted: number;
  monitored: number;
  /** MONITOR's lines of commands run inside scripts (for the record). */
  insideScripts: number;
}

/** Runs `act` with MONITOR on: how many commands clients sent, and how many scripts ran. */
async function monitored(
  redisUrl: string,
  counter: RedisCounter,
  act: () => Promise<ShapeCost>,
): Promise<{ cost: ShapeCost; top: number; lua: number }> {
  await counter.quiet();
  const url = new URL(redisUrl);
  const monitor = spawn("redis-cli", ["-h", url.hostname, "-p", url.port, "monitor"], {
    stdio: ["ignore", "pipe", "inherit"],
  });
  let out = "";
  monitor.stdout.on("data", (chunk: Buffer) => (out += chunk.toString()));
  await sleep(300); // MONITOR is on once redis-cli has connected
  const cost = await act();
  await sleep(300);
  monitor.kill();
  const lines = out.split("\n").filter((l) => /^\d+\.\d+ \[/.test(l));
  // The benchmark's own readings (INFO commandstats) are neither system's.
  const top = lines.filter((l) => !/^\S+ \[\d+ lua\]/.test(l) && !/"info"/i.test(l));
  return { cost, top: top.length, lua: lines.length - top.length };
}

/** Counts a lone job and 100 independent jobs on each system both ways. */
export async function checkCounters(
  redisUrl: string,
  counter: RedisCounter,
  ours: OurSystem,
  bull: BullSystem,
): Promise<CounterCheck[]> {
  const checks: CounterCheck[] = [];
  const shapes: [string, string, () => Promise<ShapeCost>][] = [
    ["this project", "lone", () => ours.lone()],
    ["this project", "indep100", () => ours.independent(100)],
    ["BullMQ", "lone", () => bull.lone()],
    ["BullMQ", "indep100", () => bull.independent(100)],
  ];
  for (const [who, shape, act] of shapes) {
    if (who === "BullMQ") await bull.openWorker();
    try {
      const { cost, top, lua } = await monitored(redisUrl, counter, act);
      checks.push({ who, shape, counted: cost.sent, monitored: top, insideScripts: lua });
    } finally {
      if (who === "BullMQ") await bull.closeWorker();
    }
  }
  return checks;
}
