/**
 * `npm run bench [-- --quick] [--runs N] [--json file] [--samples N] [--idle-seconds S]`: this
 * project against BullMQ on one machine and one redis-server. See docs/benchmark.md for what is
 * measured and how.
 *
 * --quick runs only this project's counted figures (commands per job: a lone job, 100 independent
 * jobs, the 100-job DAG), once, and exits 1 when one exceeds its budget (budgets.ts). No timings.
 * --profile FILE writes a CPU profile of the Worker over 1,000 pushed jobs (profile.ts) instead;
 * --profile-shape names another way to take them, `lone` for 40 lone jobs one at a time, or
 * `chain` for ten 10-job chains with the results in the runner's answers.
 * --compare REF runs this tree and the commit REF in turn, `--rounds N` times (4), and prints
 * both sides' lone-job latency and CPU (compare.ts) instead; BullMQ is not run.
 * --floor times a Worker that does only the I/O of a lone job's path, in turn with this
 * project's lone jobs and chains, `--rounds N` times (3), and prints both (floor.ts) instead.
 * --target serve runs this project's side on plain workerd as `npm run serve` runs it in
 * production (docs/deploy.md) instead of `wrangler dev` (`wrangler`, the default); with --floor,
 * `both` times the two stacks side by side, in turn within each round.
 * --scale prints how cost grows with a flow's size (scale.ts: the pure machine per job at 100 to
 * 10,000 jobs, a creation's planning and a creation through the stack at 2,000 and 10,000),
 * medians of `--runs N` (3); `--scale-pure` leaves out the stack.
 */
import { writeFileSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { parseArgs } from "node:util";
import { z } from "zod";
import { freePort } from "../infra/redis-server.js";
import { startPrivateStack } from "../test/support/private-stack.js";
import { BUDGETS } from "./budgets.js";
import { BullSystem } from "./bullmq.js";
import {
  costFigures,
  FIGURES,
  idleFigures,
  percentile,
  BATCHED_SHAPES,
  batchedFigures,
  chainFigures,
  throughputFigures,
  timingFigures,
  type Figures,
} from "./figures.js";
import { compareWith } from "./compare.js";
import { measureFloor } from "./floor.js";
import { machine, RedisCounter } from "./measure.js";
import { BATCHINGS, CONCURRENCY, OurSystem, type ShapeCost } from "./ours.js";
import { profileWorker, summarizeProfile } from "./profile.js";
import { measureScale } from "./scale.js";
import { overBudget, renderTable, spreadOf } from "./table.js";
import { checkCounters } from "./verify.js";

const root = path.resolve(import.meta.dirname, "..");
/** Lone jobs `--profile-shape lone` records. */
const LONE_PROFILED = 40;
/** 10-job chains, results in the answers, `--profile-shape chain` records. */
const CHAINS_PROFILED = 10;
/** Independent jobs of the flow each side of `--compare` runs for the Worker's CPU per job. */
const COMPARE_BULK = 300;

const Options = z.object({
  quick: z.boolean().default(false),
  "check-counters": z.boolean().default(false),
  runs: z.coerce.number().int().min(1).max(50).optional(),
  json: z.string().min(1).optional(),
  samples: z.coerce.number().int().min(5).max(1000).default(30),
  "idle-seconds": z.coerce.number().min(1).max(600).default(60),
  profile: z.string().min(1).optional(),
  /** What `--profile` records: 1,000 jobs, taken by the runner as a Batching says, or 40 lone jobs. */
  "profile-shape": z.enum([...BATCHINGS, "lone", "chain"]).default("push"),
  /** A commit to compare this tree with, paired (compare.ts). */
  compare: z.string().min(1).optional(),
  /** Rounds of `--compare` (4) or `--floor` (3). */
  rounds: z.coerce.number().int().min(1).max(50).optional(),
  /** The floor of the stack against this project (floor.ts). */
  floor: z.boolean().default(false),
  /** How cost grows with a flow's size (scale.ts); `scale-pure` without the stack. */
  scale: z.boolean().default(false),
  "scale-pure": z.boolean().default(false),
  /** How the Worker runs: `wrangler dev`, or `npm run serve`'s plain workerd; `both` with --floor only. */
  target: z.enum(["wrangler", "serve", "both"]).default("wrangler"),
});

const { values } = parseArgs({
  options: {
    quick: { type: "boolean" },
    "check-counters": { type: "boolean" },
    runs: { type: "string" },
    json: { type: "string" },
    samples: { type: "string" },
    "idle-seconds": { type: "string" },
    profile: { type: "string" },
    "profile-shape": { type: "string" },
    compare: { type: "string" },
    rounds: { type: "string" },
    floor: { type: "boolean" },
    scale: { type: "boolean" },
    "scale-pure": { type: "boolean" },
    target: { type: "string" },
  },
});
const parsed = Options.safeParse(values);
if (!parsed.success) {
  console.error(`bench: ${z.prettifyError(parsed.error)}`);
  process.exit(2);
}
// Three runs by default; quick mode counts once unless told otherwise (`--quick --runs 3`: medians).
const options = { ...parsed.data, runs: parsed.data.runs ?? (parsed.data.quick ? 1 : 3) };
if (options.target === "both" && !options.floor) {
  console.error("bench: --target both goes with --floor only (other figures run one stack at a time)");
  process.exit(2);
}
/** The one target of every mode but `--floor --target both`. */
const target = options.target === "serve" ? "serve" : "wrangler";

const began = Date.now();
const log = (message: string) => console.error(`[bench ${((Date.now() - began) / 1000).toFixed(1)} s] ${message}`);
if (options.scale || options["scale-pure"]) {
  console.log(await measureScale({ runs: options.runs, pure: options["scale-pure"], log }));
  process.exit(0);
}

if (options.compare || options.floor) {
  try {
    const { samples } = options;
    console.log(
      options.compare
        ? await compareWith(root, options.compare, { rounds: options.rounds ?? 4, samples, bulk: COMPARE_BULK, log })
        : await measureFloor(root, {
            rounds: options.rounds ?? 3,
            samples,
            targets: options.target === "both" ? ["wrangler", "serve"] : [target],
            log,
          }),
    );
    process.exit(0);
  } catch (error) {
    console.error(`bench: ${(error as Error).message}`);
    process.exit(1);
  }
}

const machineInfo = machine(root);
log(`starting a private stack (redis-server, REST endpoint, ${target === "serve" ? "npm run serve" : "wrangler dev"})`);
const inspect = options.profile ? { port: await freePort() } : undefined;
const stack = await startPrivateStack("bench", { cron: false, target, ...(inspect ? { inspect } : {}) });
const counter = await RedisCounter.open(stack.redisUrl);
let bull: BullSystem | undefined;
const runsOurs: Figures[] = [];
const runsBull: Figures[] = [];
/** Per-command breakdowns and CPU by process, for the JSON. */
const details: Record<string, unknown>[] = [];
let exitCode = 0;

try {
  const redisVersion = /redis_version:(\S+)/.exec(await counter.info("server"))?.[1] ?? "unknown";
  const ours = await OurSystem.start(stack, counter);
  log("warming up this project");
  await ours.warmUp();

  if (inspect && options.profile) {
    const shape = options["profile-shape"];
    log(
      shape === "lone"
        ? `profiling the Worker over ${LONE_PROFILED} lone jobs, one at a time`
        : shape === "chain"
          ? `profiling the Worker over ${CHAINS_PROFILED} 10-job chains, results in the answers`
          : `profiling the Worker over 1,000 jobs, ${shape} (its warm-up of 100 included)`,
    );
    const { profile, result: rate } = await profileWorker(inspect.port, async () => {
      if (shape === "lone")
        return `submit → start p50 ${percentile((await ours.loneTimings(LONE_PROFILED)).start, 50)} ms`;
      if (shape === "chain")
        return `10-job chain p50 ${percentile(await ours.chainTimings(CHAINS_PROFILED, 10, "answered"), 50)} ms`;
      const run = await ours.batchedThroughput(1000, shape);
      return `${Math.round(run.jobs / (run.wallMs / 1000))} jobs/s`;
    });
    writeFileSync(options.profile, JSON.stringify(profile));
    console.log(`${rate}; profile written to ${options.profile}`);
    console.log(summarizeProfile(profile));
  } else if (options["check-counters"]) {
    bull = new BullSystem(stack.redisUrl, counter);
    await bull.openWorker();
    await bull.warmUp();
    await bull.closeWorker();
    log("counting commands sent with MONITOR on (nothing is timed)");
    const checks = await checkCounters(stack.redisUrl, counter, ours, bull);
    for (const c of checks) {
      const verdict = c.counted === c.monitored ? "agree" : "DISAGREE";
      console.log(
        `${c.who}, ${c.shape}: counted ${c.counted}, MONITOR ${c.monitored} sent (+${c.insideScripts} inside scripts): ${verdict}`,
      );
    }
    if (checks.some((c) => c.counted !== c.monitored)) exitCode = 1;
  } else if (options.quick) {
    for (let run = 1; run <= options.runs; run++) {
      const figures: Figures = {};
      for (const [id, measure] of [
        ["lone", () => ours.lone()],
        ["indep100", () => ours.independent(100)],
        ["dag100", () => ours.dag()],
      ] as const) {
        log(`run ${run}/${options.runs}: counting ${id}`);
        const cost = keep(run, "ours", id, await measure());
        Object.assign(figures, costFigures(id, cost));
      }
      // Quick mode reports counts only: the walls measured along the way are dropped.
      for (const id of Object.keys(figures)) if (id.endsWith(".wall")) delete figures[id];
      runsOurs.push(figures);
    }
  } else {
    bull = new BullSystem(stack.redisUrl, counter);
    log("warming up BullMQ");
    await bull.openWorker();
    await bull.warmUp();
    await bull.closeWorker();
    const b = bull;
    /** A measurement of one shape on one system, turned into figures. */
    type Measure = (run: number) => Promise<Figures>;
    /** The counted shapes, by id, on each system (the layered DAG is this project's only). */
    const costs: Record<"ours" | "bull", Record<string, () => Promise<ShapeCost>>> = {
      ours: {
        lone: () => ours.lone(),
        indep100: () => ours.independent(100),
        tree100: () => ours.tree(100),
        dag100: () => ours.dag(),
        tput1000: () => ours.independent(1000),
        ...Object.fromEntries(
          Object.entries(BATCHED_SHAPES).map(([id, how]) => [id, () => ours.batchedThroughput(1000, how)]),
        ),
      },
      bull: {
        lone: () => b.lone(),
        indep100: () => b.independent(100),
        tree100: () => b.tree(100),
        tput1000: () => b.independent(1000),
      },
    };
    const counted =
      (system: "ours" | "bull", id: string): Measure =>
      async (run) => {
        const cost = keep(run, system, id, await (costs[system][id] as () => Promise<ShapeCost>)());
        const how = BATCHED_SHAPES[id];
        if (how) return batchedFigures(cost, how);
        return id === "tput1000" ? throughputFigures(cost) : costFigures(id, cost);
      };
    const chainSamples = Math.ceil(options.samples / 3);
    const shapes: { id: string; ours: Measure; bull?: Measure }[] = [
      { id: "lone", ours: counted("ours", "lone"), bull: counted("bull", "lone") },
      { id: "indep100", ours: counted("ours", "indep100"), bull: counted("bull", "indep100") },
      { id: "tree100", ours: counted("ours", "tree100"), bull: counted("bull", "tree100") },
      { id: "dag100", ours: counted("ours", "dag100") },
      {
        id: "latency",
        ours: async () => timingFigures(await ours.loneTimings(options.samples)),
        bull: async () => timingFigures(await b.loneTimings(options.samples)),
      },
      {
        id: "chain10",
        ours: async () => chainFigures(await ours.chainTimings(chainSamples, 10)),
        bull: async () => chainFigures(await b.chainTimings(chainSamples, 10)),
      },
      // The result alone reported, as the reference runner does (BullMQ's column repeats its own).
      {
        id: "latency.result-only",
        ours: async () => ({
          "resultonly.applied.p50": percentile((await ours.loneTimings(options.samples, "result-only")).applied, 50),
        }),
      },
      // The same with the results in the runner's answers (BullMQ's column repeats its own).
      {
        id: "latency.answered",
        ours: async () => ({
          "answered.applied.p50": percentile((await ours.loneTimings(options.samples, "answered")).applied, 50),
        }),
      },
      {
        id: "chain10.answered",
        ours: async () => ({
          "answered.chain10.p50": percentile(await ours.chainTimings(chainSamples, 10, "answered"), 50),
        }),
      },
      { id: "tput1000", ours: counted("ours", "tput1000"), bull: counted("bull", "tput1000") },
      ...Object.keys(BATCHED_SHAPES).map((id) => ({ id, ours: counted("ours", id) })),
    ];
    for (let run = 1; run <= options.runs; run++) {
      const figures = { ours: {} as Figures, bull: {} as Figures };
      for (const shape of shapes) {
        // Alternate who goes first, per shape and per run: neither always finds a warmer machine.
        const oursFirst = (run + shapes.indexOf(shape)) % 2 === 1;
        const order = oursFirst ? (["ours", "bull"] as const) : (["bull", "ours"] as const);
        for (const who of order) {
          const measure = who === "ours" ? shape.ours : shape.bull;
          if (!measure) continue;
          log(`run ${run}/${options.runs}: ${shape.id}, ${who === "ours" ? "this project" : "BullMQ"}`);
          if (who === "bull") await b.openWorker();
          try {
            Object.assign(figures[who], await measure(run));
          } finally {
            if (who === "bull") await b.closeWorker();
          }
        }
      }
      // BullMQ's open-source worker takes one job at a time: its one throughput is the comparison.
      const bullRate = figures.bull["tput1000.rate"];
      if (bullRate !== undefined) for (const id of Object.keys(BATCHED_SHAPES)) figures.bull[`${id}.rate`] = bullRate;
      for (const [id, as] of [
        ["applied.p50", "answered.applied.p50"],
        ["chain10.p50", "answered.chain10.p50"],
        ["applied.p50", "resultonly.applied.p50"],
      ] as const) {
        const bullFigure = figures.bull[id];
        if (bullFigure !== undefined) figures.bull[as] = bullFigure;
      }
      runsOurs.push(figures.ours);
      runsBull.push(figures.bull);
      details.push({ run, loadAverage: os.loadavg() });
    }
    // Idle cost once: it is a property of each system at rest, and each window is long.
    ours.close(); // the answering context's stream, followed while measured, rests too
    const windowMs = options["idle-seconds"] * 1000;
    log(`idle: this project, one sweep, then a ${options["idle-seconds"]} s window of rest`);
    const idleOurs = await ours.idle(windowMs, 1000);
    log(`idle: BullMQ, a ${options["idle-seconds"]} s window of an idle worker`);
    const idleBull = await b.idle(windowMs, 1000);
    Object.assign(runsOurs[0] as Figures, idleFigures(idleOurs.background, idleOurs.sweep));
    Object.assign(runsBull[0] as Figures, idleFigures(idleBull));
    details.push({ idle: { ours: idleOurs, bullmq: idleBull } });
  }
  ours.close();
  if (ours.anomalies.length) log(`result reports not applied at first try: ${ours.anomalies.slice(0, 5).join("; ")}`);

  if (!options["check-counters"] && !options.profile) report(redisVersion, ours.anomalies);
} catch (error) {
  console.error(error);
  exitCode = 2;
} finally {
  await bull?.close();
  counter.close();
  await stack.stop();
  log("done");
}
process.exit(exitCode);

/** Prints the table (and checks the budgets in quick mode); writes the JSON when asked. */
function report(redisVersion: string, anomalies: readonly string[]): void {
  const loadAtEnd = os.loadavg();
  const load = (l: number[]) => l.map((x) => x.toFixed(2)).join(" ");
  console.log(
    `\n${options.quick ? "Quick: counted figures of this project only" : "This project against BullMQ"}; ` +
      `${options.runs} run(s)${options.runs > 1 ? ", medians (min–max)" : ""}; ` +
      `${machineInfo.cores} cores (${machineInfo.cpu}), ${machineInfo.memoryGiB} GiB, ${machineInfo.os}; ` +
      `load average ${load(machineInfo.loadAverageAtStart)} at start, ${load(loadAtEnd)} at end; ` +
      `redis-server ${redisVersion}, ${target === "serve" ? "npm run serve (workerd) of" : "wrangler dev"} ${machineInfo.wrangler}, ` +
      (options.quick
        ? `runner concurrency ${CONCURRENCY}.\n`
        : `BullMQ ${machineInfo.bullmq} (ioredis ${machineInfo.ioredis}), concurrency ${CONCURRENCY}, ` +
          `${options.samples} latency samples per run; ratio: this project ÷ BullMQ.\n`),
  );
  console.log(renderTable(runsOurs, runsBull, options.quick));
  const over = overBudget(runsOurs);
  if (options.quick) {
    if (over.length) {
      exitCode = 1;
      for (const o of over) console.log(`OVER BUDGET: ${o.figure} = ${o.value.toFixed(2)} > ${o.max}`);
    } else console.log("\nEvery counted figure is within its budget.");
    for (const b of BUDGETS) {
      const s = spreadOf(runsOurs, b.figure);
      if (b.goal !== undefined && s && s.median > b.goal)
        console.log(`not yet at its goal: ${b.figure} = ${s.median.toFixed(2)} (goal ${b.goal}, limit ${b.max})`);
    }
  }

  if (options.json) {
    const summary = Object.fromEntries(
      FIGURES.map((f) => [f.id, { label: f.label, ours: spreadOf(runsOurs, f.id), bullmq: spreadOf(runsBull, f.id) }]),
    );
    const json = {
      date: new Date(began).toISOString(),
      durationSeconds: (Date.now() - began) / 1000,
      options,
      machine: { ...machineInfo, redis: redisVersion, loadAverageAtEnd: loadAtEnd },
      budgets: BUDGETS,
      overBudget: over,
      summary,
      runs: { ours: runsOurs, bullmq: runsBull },
      details,
      anomalies,
    };
    writeFileSync(options.json, `${JSON.stringify(json, null, 2)}\n`);
    log(`figures written to ${options.json}`);
  }
}

/** Keeps a counted shape's breakdown (commands by name, CPU by process) for the JSON; passes it on. */
function keep(run: number, who: string, id: string, cost: ShapeCost): ShapeCost {
  const { executed, cpu, sent, requests, wallMs, jobs } = cost;
  details.push({ run, who, shape: id, jobs, wallMs, sent, requests, executed, cpu });
  return cost;
}
