import type { Batching, LoneTimings, ShapeCost } from "./ours.js";
import { STEPS, type Step } from "./steps.js";

// The figures the benchmark reports, in the order of the table, and how each is read off a
// shape's measurement. A run fills a Figures record for each system.

/** A figure of the table. */
export interface Figure {
  id: string;
  label: string;
  /** Decimals shown. */
  decimals: number;
  /** Unit shown after the number ("" for a count). */
  unit: string;
}

/** The steps of a lone job (steps.ts), as the table names them. */
const STEP_LABELS: Record<Step, string> = {
  ready: "lone job, step 1: submit → job.ready in the flow's object (route, reservation), p50",
  dispatched: "lone job, step 2: → job.dispatched (the creation's commit and claim, the assignment), p50",
  start: "lone job, step 3: → job starts at the runner (signed POST), p50",
  reported: "lone job, step 4: → job.finished in the flow's object (signed started, then signed result), p50",
  applied: "lone job, step 5: → result applied at the runner (commit, answer), p50",
};

export const FIGURES: readonly Figure[] = [
  {
    id: "lone.sent",
    label: "commands sent / job, a flow of one job, started and result reported (one EVALSHA = 1)",
    decimals: 1,
    unit: "",
  },
  {
    id: "lone.executed",
    label: "executed commands / job, a flow of one job (script internals included)",
    decimals: 1,
    unit: "",
  },
  { id: "lone.requests", label: "storage round trips (REST requests) / job, a flow of one job", decimals: 1, unit: "" },
  { id: "indep100.sent", label: "commands sent / job, 100 independent jobs", decimals: 2, unit: "" },
  { id: "indep100.executed", label: "executed commands / job, 100 independent jobs", decimals: 2, unit: "" },
  { id: "tree100.sent", label: "commands sent / job, 100-job tree", decimals: 2, unit: "" },
  { id: "tree100.executed", label: "executed commands / job, 100-job tree", decimals: 2, unit: "" },
  { id: "tree100.wall", label: "100-job tree, submit → last result applied", decimals: 0, unit: " ms" },
  { id: "dag100.sent", label: "commands sent / job, 100-job layered DAG (10×10)", decimals: 2, unit: "" },
  { id: "dag100.executed", label: "executed commands / job, 100-job layered DAG (10×10)", decimals: 2, unit: "" },
  { id: "dag100.wall", label: "100-job layered DAG, submit → last result applied", decimals: 0, unit: " ms" },
  { id: "start.p50", label: "submit → job starts at the runner, p50", decimals: 1, unit: " ms" },
  { id: "start.p95", label: "submit → job starts at the runner, p95", decimals: 1, unit: " ms" },
  { id: "applied.p50", label: "submit → result applied, started and result reported, p50", decimals: 1, unit: " ms" },
  ...STEPS.map((step) => ({ id: `step.${step}.p50`, label: STEP_LABELS[step], decimals: 1, unit: " ms" })),
  { id: "chain10.p50", label: "10-job chain end to end, started and result reported, p50", decimals: 0, unit: " ms" },
  {
    id: "resultonly.applied.p50",
    label: "submit → result applied, the result alone reported (no started: the reference runner's path), p50",
    decimals: 1,
    unit: " ms",
  },
  {
    id: "answered.applied.p50",
    label: "submit → result applied, the result in the runner's answer (seen on the context's stream), p50",
    decimals: 1,
    unit: " ms",
  },
  {
    id: "answered.chain10.p50",
    label: "10-job chain end to end, the results in the runner's answers, p50",
    decimals: 0,
    unit: " ms",
  },
  {
    id: "tput1000.rate",
    label: "throughput, 1,000 independent trivial jobs, one a POST, started and result reported",
    decimals: 0,
    unit: " jobs/s",
  },
  { id: "tput1000.sent", label: "commands sent / job, 1,000 independent jobs", decimals: 2, unit: "" },
  { id: "tput1000.executed", label: "executed commands / job, 1,000 independent jobs", decimals: 2, unit: "" },
  {
    id: "single1000.rate",
    label: "throughput, 1,000 jobs, one a POST, the result alone reported (no started)",
    decimals: 0,
    unit: " jobs/s",
  },
  {
    id: "cpu.single.workerd",
    label: "CPU / job in the Worker's workerd, 1,000 jobs, one a POST, the result alone reported",
    decimals: 2,
    unit: " ms",
  },
  {
    id: "batched1000.rate",
    label: "throughput, 1,000 jobs, batched (pull leases of 50; 100 reports a request)",
    decimals: 0,
    unit: " jobs/s",
  },
  {
    id: "cpu.batched.workerd",
    label: "CPU / job in the Worker's workerd, 1,000 jobs batched",
    decimals: 2,
    unit: " ms",
  },
  {
    id: "pushbatch1000.rate",
    label: "throughput, 1,000 jobs, pushed, results batched (100 a request)",
    decimals: 0,
    unit: " jobs/s",
  },
  {
    id: "cpu.pushbatch.workerd",
    label: "CPU / job in the Worker's workerd, 1,000 jobs pushed, results batched",
    decimals: 2,
    unit: " ms",
  },
  {
    id: "pushposts1000.rate",
    label: "throughput, 1,000 jobs, pushed 50 a POST, results batched",
    decimals: 0,
    unit: " jobs/s",
  },
  {
    id: "cpu.pushposts.workerd",
    label: "CPU / job in the Worker's workerd, 1,000 jobs pushed 50 a POST, results batched",
    decimals: 2,
    unit: " ms",
  },
  {
    id: "answers1000.rate",
    label: "throughput, 1,000 jobs, pushed 50 a POST, results in the answers",
    decimals: 0,
    unit: " jobs/s",
  },
  {
    id: "cpu.answers.workerd",
    label: "CPU / job in the Worker's workerd, 1,000 jobs pushed 50 a POST, results in the answers",
    decimals: 2,
    unit: " ms",
  },
  { id: "cpu.bulk", label: "CPU / job, all processes, 1,000 jobs", decimals: 2, unit: " ms" },
  {
    id: "cpu.bulk.workerd",
    label: "CPU / job in the Worker's workerd (not wrangler's proxy), 1,000 jobs, started and result reported",
    decimals: 2,
    unit: " ms",
  },
  { id: "cpu.lone", label: "CPU / job, all processes, lone jobs one at a time", decimals: 2, unit: " ms" },
  { id: "idle.sweep.executed", label: "one sweep, 1,000 jobs waiting: executed commands", decimals: 0, unit: "" },
  { id: "idle.sweep.sent", label: "one sweep, 1,000 jobs waiting: commands sent", decimals: 0, unit: "" },
  { id: "idle.executed", label: "idle, 1,000 jobs waiting: executed commands / minute", decimals: 0, unit: "" },
  { id: "idle.sent", label: "idle, 1,000 jobs waiting: commands sent / minute", decimals: 0, unit: "" },
  { id: "idle.cpu", label: "idle, 1,000 jobs waiting: CPU / minute, measured processes", decimals: 0, unit: " ms" },
];

/** Figure values of one system in one run, by figure id. */
export type Figures = Record<string, number>;

/** The `p`-th percentile (0–100) of `values`, nearest rank. */
export function percentile(values: readonly number[], p: number): number {
  if (values.length === 0) return NaN;
  const sorted = [...values].sort((a, b) => a - b);
  const rank = Math.max(1, Math.ceil((p / 100) * sorted.length));
  return sorted[rank - 1] as number;
}

/** The median of `values` (the mean of the middle two for an even count). */
export function median(values: readonly number[]): number {
  if (values.length === 0) return NaN;
  const sorted = [...values].sort((a, b) => a - b);
  const mid = Math.floor(sorted.length / 2);
  return sorted.length % 2 ? (sorted[mid] as number) : ((sorted[mid - 1] as number) + (sorted[mid] as number)) / 2;
}

/** The per-job figures of a counted shape, under `id.`. */
export function costFigures(id: string, cost: ShapeCost): Figures {
  const figures: Figures = {
    [`${id}.sent`]: cost.sent / cost.jobs,
    [`${id}.executed`]: cost.executed.total / cost.jobs,
    [`${id}.wall`]: cost.wallMs,
  };
  if (cost.requests !== undefined) figures[`${id}.requests`] = cost.requests / cost.jobs;
  return figures;
}

/** Latency figures of a series of lone jobs. */
export function timingFigures(timings: LoneTimings): Figures {
  return {
    "start.p50": percentile(timings.start, 50),
    "start.p95": percentile(timings.start, 95),
    "applied.p50": percentile(timings.applied, 50),
    "cpu.lone": timings.cpuPerJob,
    ...Object.fromEntries(
      STEPS.flatMap((step) => {
        const samples = timings.steps?.[step] ?? [];
        return samples.length > 0 ? [[`step.${step}.p50`, percentile(samples, 50)]] : [];
      }),
    ),
  };
}

/** The chain figure: p50 of the samples. */
export function chainFigures(times: number[]): Figures {
  return { "chain10.p50": percentile(times, 50) };
}

/** Throughput figures of the 1,000-job run. */
export function throughputFigures(cost: ShapeCost): Figures {
  return {
    "tput1000.rate": cost.jobs / (cost.wallMs / 1000),
    "tput1000.sent": cost.sent / cost.jobs,
    "tput1000.executed": cost.executed.total / cost.jobs,
    "cpu.bulk": (cost.cpu.total ?? 0) / cost.jobs,
    ...(cost.cpu.workerd !== undefined ? { "cpu.bulk.workerd": cost.cpu.workerd / cost.jobs } : {}),
  };
}

/** The batched runs, by shape id (its rate is `<id>.rate`), and how each takes its jobs. */
export const BATCHED_SHAPES: Readonly<Record<string, Batching>> = {
  batched1000: "pull",
  pushbatch1000: "push",
  pushposts1000: "posts",
  answers1000: "answers",
  single1000: "single",
};

/** The figures of each kind of batched run: its rate and the Worker's CPU per job. */
const BATCHED: Record<Batching, [string, string]> = {
  pull: ["batched1000.rate", "cpu.batched.workerd"],
  push: ["pushbatch1000.rate", "cpu.pushbatch.workerd"],
  posts: ["pushposts1000.rate", "cpu.pushposts.workerd"],
  answers: ["answers1000.rate", "cpu.answers.workerd"],
  single: ["single1000.rate", "cpu.single.workerd"],
  readme: ["readme1000.rate", "cpu.readme.workerd"],
  inline: ["inline1000.rate", "cpu.inline.workerd"],
};

/**
 * Throughput figures of a 1,000-job run with batching (this project only): pulled, pushed with
 * results batched, pushed several deliveries a POST with results batched, or with the results in
 * the answers.
 */
export function batchedFigures(cost: ShapeCost, how: Batching): Figures {
  const [rate, cpu] = BATCHED[how];
  return {
    [rate]: cost.jobs / (cost.wallMs / 1000),
    ...(cost.cpu.workerd !== undefined ? { [cpu]: cost.cpu.workerd / cost.jobs } : {}),
  };
}

/**
 * Idle figures, per minute: the rate over a window of rest (`background`), plus one sweep for
 * this project, whose cron fires it once a minute.
 */
export function idleFigures(background: ShapeCost, sweep?: ShapeCost): Figures {
  const perMinute = 60_000 / background.wallMs;
  return {
    "idle.executed": background.executed.total * perMinute + (sweep?.executed.total ?? 0),
    "idle.sent": background.sent * perMinute + (sweep?.sent ?? 0),
    "idle.cpu": (background.cpu.total ?? 0) * perMinute + (sweep?.cpu.total ?? 0),
    ...(sweep ? { "idle.sweep.executed": sweep.executed.total, "idle.sweep.sent": sweep.sent } : {}),
  };
}
