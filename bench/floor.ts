import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import http from "node:http";
import os from "node:os";
import path from "node:path";
import { DEFAULT_REST_OPTIONS, startRestServer } from "../infra/redis-rest/index.js";
import { freePort, startRedisServer } from "../infra/redis-server.js";
import { memoryBackedDir } from "../infra/memory-dir.js";
import { startServe } from "../infra/serve/serve.js";
import { startWranglerDev } from "../infra/wrangler.js";
import { startPrivateStack, type PrivateStack } from "../test/support/private-stack.js";
import type { WorkerTarget } from "../test/support/worker-process.js";
import { percentile } from "./figures.js";
import { RedisCounter } from "./measure.js";
import { OurSystem } from "./ours.js";

/** How `--floor` runs. */
export interface FloorOptions {
  /** Rounds; each times every path and this project's lone jobs and chains once. */
  rounds: number;
  /** Requests per path (and lone jobs) per round. */
  samples: number;
  /** The stacks to time, each floor beside this project on the same target, in turn within each round. */
  targets: WorkerTarget[];
  log(message: string): void;
}

/** The floor Worker's paths (bench/floor-worker/worker.ts), in order, with what each adds. */
export const FLOOR_PATHS = [
  ["proxy", "the front (wrangler dev's proxy; serve's front Worker), the Worker, its delivery to the runner"],
  ["one-trip", "+ one storage round trip before the delivery"],
  ["two-trips", "+ a second round trip after the first (a reservation, then a creation)"],
  ["object-one-trip", "a fresh Durable Object per flow: its write, one round trip, the delivery"],
  ["object-two-trips", "a reservation in the Worker, then the fresh object as above: a lone job's path"],
] as const;

/** The floor of a 10-job chain, results in the answers: a delivery, its answer, a round trip, ten times. */
const CHAIN_PATH = "chain";
/** Chains timed per round (each about ten lone jobs' worth). */
const CHAINS_PER_ROUND = 5;

type Series = Record<string, number[]>;

/**
 * The floor of this stack (docs/benchmark.md, "The floor"): a Worker that does only the I/O a
 * lone job's path is made of, on a stack of its own (redis-server, the REST endpoint, the Worker
 * under `wrangler dev` or `npm run serve`'s workerd, a runner in this process that notes when
 * each delivery arrives), timed in turn with this project's lone jobs and 10-job chains on a
 * private stack of the same target, round after round, so that every series sees the same
 * machine. With two targets, both run in every round. Returns the table: per path and target,
 * p50 and p95 over every round's samples.
 */
export async function measureFloor(root: string, options: FloorOptions): Promise<string> {
  const sides: { target: WorkerTarget; floor: FloorStack; stack: PrivateStack; ours?: OurSystem }[] = [];
  const times: Record<string, Series> = {};
  const add = (target: string, name: string, values: number[]) => ((times[target] ??= {})[name] ??= []).push(...values);
  try {
    for (const target of options.targets) {
      options.log(`starting the floor's stack and a private stack (${target})`);
      const floor = await startFloorStack(path.join(root, "bench", "floor-worker"), target);
      const side: (typeof sides)[number] = {
        target,
        floor,
        stack: await startPrivateStack("floor", { cron: false, target }),
      };
      sides.push(side);
      side.ours = await OurSystem.start(side.stack, await RedisCounter.open(side.stack.redisUrl));
      await side.ours.warmUp();
      for (const [name] of FLOOR_PATHS) await floor.time(name, 5); // warm-up
    }
    for (let round = 1; round <= options.rounds; round++) {
      for (const { target, floor, ours } of sides) {
        options.log(`round ${round}/${options.rounds}, ${target}: the floor's paths`);
        for (let i = 0; i < options.samples; i++)
          for (const [name] of FLOOR_PATHS) add(target, name, await floor.time(name, 1));
        add(target, CHAIN_PATH, await floor.time(CHAIN_PATH, CHAINS_PER_ROUND, true));
        options.log(`round ${round}/${options.rounds}, ${target}: this project`);
        add(target, "lone", (await (ours as OurSystem).loneTimings(options.samples)).start);
        add(target, "ours-chain", await (ours as OurSystem).chainTimings(CHAINS_PER_ROUND, 10, "answered"));
      }
    }
  } finally {
    for (const side of sides) {
      side.ours?.close();
      await side.stack.stop();
      await side.floor.stop();
    }
  }
  return options.targets.length === 1
    ? renderFloor(times[options.targets[0] as WorkerTarget] ?? {}, options)
    : renderFloorTargets(times, options);
}

/** The table of `measureFloor` for one target. */
export function renderFloor(times: Series, options: Pick<FloorOptions, "rounds" | "samples" | "targets">): string {
  const row = (label: string, values: number[] | undefined) =>
    `| ${label} | ${percentile(values ?? [], 50).toFixed(1)} | ${percentile(values ?? [], 95).toFixed(1)} |`;
  return [
    `The floor of this stack (${options.targets.join()}) against this project, ${options.rounds} rounds of ${options.samples} (ms):`,
    "",
    "| submit → the runner has the job | p50 | p95 |",
    "|---|---|---|",
    ...FLOOR_PATHS.map(([name, what]) => row(`floor: ${what}`, times[name])),
    row("**this project: a lone job**", times.lone),
    "",
    "| submit → a 10-job chain's last result stored, results in the answers | p50 | p95 |",
    "|---|---|---|",
    row("floor: a reservation, the object, then ten deliveries each answered and stored", times[CHAIN_PATH]),
    row("**this project: a 10-job chain**", times["ours-chain"]),
  ].join("\n");
}

/** The table of `measureFloor` for several targets: p50 / p95 per target, side by side. */
export function renderFloorTargets(
  times: Record<string, Series>,
  options: Pick<FloorOptions, "rounds" | "samples" | "targets">,
): string {
  const cell = (values: number[] | undefined) =>
    `${percentile(values ?? [], 50).toFixed(1)} / ${percentile(values ?? [], 95).toFixed(1)}`;
  const row = (label: string, name: string) =>
    `| ${label} | ${options.targets.map((t) => cell(times[t]?.[name])).join(" | ")} |`;
  const header = (what: string) => [
    `| ${what} | ${options.targets.map((t) => `${t}: p50 / p95`).join(" | ")} |`,
    `|---|${options.targets.map(() => "---").join("|")}|`,
  ];
  return [
    `The floor of each stack against this project, ${options.rounds} rounds of ${options.samples}, the targets in turn (ms):`,
    "",
    ...header("submit → the runner has the job"),
    ...FLOOR_PATHS.map(([name, what]) => row(`floor: ${what}`, name)),
    row("**this project: a lone job**", "lone"),
    "",
    ...header("submit → a 10-job chain's last result stored, results in the answers"),
    row("floor: a reservation, the object, then ten deliveries each answered and stored", CHAIN_PATH),
    row("**this project: a 10-job chain**", "ours-chain"),
  ].join("\n");
}

/** The floor's own stack (see measureFloor). */
export interface FloorStack {
  /** Sends `n` requests down a path, one at a time: submit → the first delivery's arrival, or (`whole`) → the answer. */
  time(name: string, n: number, whole?: boolean): Promise<number[]>;
  /** Deliveries the runner has taken so far. */
  deliveries(): number;
  stop(): Promise<void>;
}

/**
 * Starts the floor's stack: the Worker of `cwd` (bench/floor-worker) on a redis-server of its
 * own, under `wrangler dev` or on plain workerd as `npm run serve` runs a Worker (`startServe`).
 */
export async function startFloorStack(cwd: string, target: WorkerTarget = "wrangler"): Promise<FloorStack> {
  const dir = mkdtempSync(path.join(os.tmpdir(), "bench-floor-"));
  const redis = await startRedisServer({ port: await freePort(), dir });
  const token = "floor";
  const rest = await startRestServer({ ...DEFAULT_REST_OPTIONS, redisUrl: redis.url, token, port: 0 });
  let arrived: ((at: number) => void) | undefined;
  let deliveries = 0;
  const runner = http.createServer((req, res) => {
    deliveries++;
    arrived?.(performance.now());
    req.resume();
    req.once("end", () => res.writeHead(200).end("{}"));
  });
  const runnerPort = await freePort();
  await new Promise<void>((resolve) => runner.listen(runnerPort, "127.0.0.1", resolve));
  const envFile = path.join(dir, ".env");
  writeFileSync(envFile, `REST_TOKEN=${token}\n`);
  const vars = { REST_URL: rest.url, RUNNER_URL: `http://127.0.0.1:${runnerPort}/` };
  const port = await freePort();
  // In memory, as wrangler dev keeps its Durable Objects' storage by default (infra/wrangler.ts).
  const data = mkdtempSync(path.join(memoryBackedDir(), "bench-floor-serve-"));
  const worker =
    target === "serve"
      ? await startServe({
          configPath: path.join(cwd, "wrangler.toml"),
          data,
          listen: `127.0.0.1:${port}`,
          vars,
          secrets: { REST_TOKEN: token },
          cron: false,
          onLine: () => {},
        })
      : await startWranglerDev({ port, envFile, cwd, vars });
  return {
    deliveries: () => deliveries,
    async time(name: string, n: number, whole = false): Promise<number[]> {
      const out: number[] = [];
      for (let i = 0; i < n; i++) {
        const t0 = performance.now();
        const first = new Promise<number>((resolve) => (arrived = resolve));
        const res = await fetch(`${worker.url}/?path=${name}`, { method: "POST", body: "{}" });
        if (res.status !== 201) throw new Error(`--floor: path ${name} answered ${res.status}: ${await res.text()}`);
        const end = performance.now();
        out.push((whole ? end : await first) - t0);
        await new Promise((resolve) => setTimeout(resolve, 20));
      }
      return out;
    },
    async stop() {
      await worker.stop();
      runner.close();
      await rest.close();
      await redis.stop();
      rmSync(dir, { recursive: true, force: true });
      rmSync(data, { recursive: true, force: true });
    },
  };
}
