import { apply, FlowSubmission, newFlowState, resolveDag } from "../shared/flow/index.js";
import { Keys } from "../shared/keys.js";
import { CALL_BYTES, callBytes, FlowStore, planCommit } from "../shared/store/index.js";
import { shJobs } from "../test/support/jobs.js";
import { flowOfJobs, layeredJobs, runToEnd } from "../test/support/flow-scale.js";
import { startPrivateStack } from "../test/support/private-stack.js";
import { percentile } from "./figures.js";
import { cpuBetween, cpuSample, listenerPid } from "./measure.js";

/**
 * `npm run bench -- --scale`: how cost grows with a flow's size (issue 33), beside the main table.
 * - the pure machine's time per job, running a layered DAG (layers of √n jobs, each job on two of
 *   the layer above) of 100 to 10,000 jobs to its end, every job assigned, delivered, started
 *   and finished, with the stream's changes and the journal's entries of each transition
 *   (test/support/flow-scale.ts; the unit test flow-machine-scale.test.ts counts the same runs);
 * - the planning of a creation, pure: a submission of n jobs all ready at once parsed, resolved,
 *   made a state, started, and its storage calls planned (what the Worker and the flow's object
 *   compute before storage is called);
 * - a creation through the stack (wrangler dev, the REST endpoint, redis-server): a flow of n
 *   jobs submitted with `start`, from the request to its answer, with no runner to take them;
 *   by the clock, and in CPU time: workerd's (the Worker and its objects, not wrangler's proxy)
 *   and every process's (this one, with the REST endpoint and the client, redis-server,
 *   wrangler's), read from /proc (Linux), which a loaded machine disturbs far less than the clock.
 * Medians of `runs` (after one run of each not counted): CPU time for the pure rows, the clock
 * and CPU time for the stack's.
 */
export interface ScaleOptions {
  runs: number;
  /** Skip the stack's row (pure rows only, in seconds). */
  pure: boolean;
  log(message: string): void;
}

const MACHINE_SIZES = [100, 1_000, 2_000, 5_000, 10_000];
const CREATION_SIZES = [2_000, 10_000];

/** The rows, as a Markdown table. */
export async function measureScale(options: ScaleOptions): Promise<string> {
  const rows: string[][] = [];
  for (const n of MACHINE_SIZES) {
    options.log(`machine: ${n} jobs`);
    const times = timed(options.runs, () => runToEnd(flowOfJobs(layeredJobs(n))));
    const ms = percentile(times, 50);
    rows.push([
      `pure machine, ${n.toLocaleString("en")}-job layered DAG to its end`,
      fmt(ms),
      `${fmt((ms * 1000) / n)} µs`,
    ]);
  }
  for (const n of CREATION_SIZES) {
    options.log(`creation planned: ${n} jobs`);
    const ms = percentile(
      timed(options.runs, () => planCreation(n)),
      50,
    );
    rows.push([`creation planned, ${n.toLocaleString("en")} jobs all ready`, fmt(ms), `${fmt((ms * 1000) / n)} µs`]);
  }
  if (!options.pure) rows.push(...(await stackCreations(options)));
  return [
    "| row | ms (pure rows: CPU) | per job |",
    "|---|---:|---:|",
    ...rows.map((r) => `| ${r.join(" | ")} |`),
  ].join("\n");
}

/**
 * Runs `work` once to warm up, then `runs` times; the CPU time of each (this process's, user and
 * system), in ms: on a shared machine the clock counts what others ran too, the CPU far less.
 */
function timed(runs: number, work: () => unknown): number[] {
  work();
  return Array.from({ length: runs }, () => {
    const began = process.cpuUsage();
    work();
    const used = process.cpuUsage(began);
    return (used.user + used.system) / 1000;
  });
}

const fmt = (ms: number) => (ms >= 100 ? ms.toFixed(0) : ms.toFixed(1));

/** What a submission of `n` jobs all ready costs before storage: parse, resolve, state, start, plan. */
function planCreation(n: number): void {
  const submission = FlowSubmission.parse({ start: true, jobs: shJobs("j", n) });
  let next = 1_000_000;
  const resolved = resolveDag(submission.jobs, () => next++);
  if ("issues" in resolved) throw new Error("bench: the flow did not resolve");
  const state = newFlowState({
    ...{ id: 7, contextId: 3, callerId: 5, envVars: {}, traceId: "" },
    timeouts: { timeout: 300, timeout_ack: 60 },
    jobs: resolved.jobs,
    messageBase: 5_000_000,
  });
  const t = apply(state, { type: "start", at: Date.now() });
  const keys = new Keys("");
  const store = new FlowStore(undefined as never, keys);
  const creation = store.creation(state, [], Date.now());
  const commit = planCommit(
    keys,
    [{ state: t.state, effects: t.effects }],
    Date.now(),
    undefined,
    CALL_BYTES - callBytes(creation),
  );
  store.withCommit(creation, commit);
}

/** Creations through a private stack: submit → answer, ms. */
async function stackCreations(options: ScaleOptions): Promise<string[][]> {
  options.log("starting a private stack (redis-server, REST endpoint, wrangler dev)");
  const stack = await startPrivateStack("bench-scale", { cron: false });
  try {
    const { client } = await stack.newActor();
    const ctx = (await client.createContext()).id;
    const proxy = listenerPid(Number(new URL(stack.url).port));
    const rows: string[][] = [];
    for (const n of CREATION_SIZES) {
      const times: number[] = [];
      const workerd: number[] = [];
      const total: number[] = [];
      for (let run = 0; run <= options.runs; run++) {
        options.log(`creation through the stack: ${n} jobs, run ${run}`);
        const before = cpuSample(undefined, proxy);
        const began = performance.now();
        const flow = await client.submitFlow(ctx, { start: true, jobs: shJobs("j", n) });
        const took = performance.now() - began;
        const cpu = cpuBetween(before, cpuSample(undefined, proxy));
        if (run > 0) {
          times.push(took);
          workerd.push(cpu.workerd ?? 0);
          total.push(cpu.total ?? 0);
        }
        await client.cancelFlow(ctx, flow.id, "bench");
      }
      const row = (what: string, xs: number[]) => {
        const ms = percentile(xs, 50);
        return [
          `creation through the stack, ${n.toLocaleString("en")} jobs all ready, ${what}`,
          fmt(ms),
          `${fmt((ms * 1000) / n)} µs`,
        ];
      };
      rows.push(row("submit → answer", times), row("workerd CPU", workerd), row("CPU of every process", total));
    }
    return rows;
  } finally {
    await stack.stop();
  }
}
