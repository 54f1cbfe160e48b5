import { rmSync, writeFileSync } from "node:fs";
import path from "node:path";
import { actorKeyId, generateKeyPair } from "../../shared/auth/index.js";
import { ApiError, CoordinatorClient, signerFromJwk } from "../../shared/client/index.js";
import type { FlowSubmissionInput } from "../../shared/flow/index.js";
import type { FlowView } from "../../shared/model/index.js";
import { eventually } from "../support/eventually.js";
import { runsIn } from "../support/flow-runs.js";
import { startPrivateStack, type PrivateStack, type TestRunnerProcess } from "../support/private-stack.js";
import type { RegisteredRunner } from "../support/runner-process.js";
import { mulberry32, type Random } from "../support/random.js";
import { describeFlow } from "./describe.js";
import { checkStreams } from "./stream-check.js";
import { flowShape } from "./shapes.js";
import { queuedIn } from "../support/prefix.js";

/** How a soak runs: its seed (the same seed, the same flows and faults in the same order) and length. */
export interface SoakOptions {
  seed: number;
  /** How long flows are submitted and faults injected, in ms; then everything heals and settles. */
  durationMs: number;
  /** How long the flows may take to end once the faults stopped. */
  settleMs?: number;
  log?: (line: string) => void;
}

/** One invariant as checked at the end: what it says, whether it held, and what was seen. */
export interface Invariant {
  name: string;
  held: boolean;
  detail: string;
}

export interface SoakReport {
  seed: number;
  flows: number;
  faults: string[];
  invariants: Invariant[];
  ok: boolean;
}

/** Retries each job gets: enough to outlast a runner killed under it a few times. */
const RETRIES = 4;
const TIMEOUTS = { timeout: 90, timeout_ack: 15, timeout_result: 30, retry_base_ms: 200, retry_cap_ms: 3_000 };

interface SoakRunner {
  registered: RegisteredRunner<TestRunnerProcess>;
  procs: TestRunnerProcess[];
  /** The file whose presence makes it answer 503 (a runner that is down for a while). */
  refuse: string;
}

/**
 * A seeded, bounded soak on the real local stack: flows of varied shapes (chains, diamonds, fans,
 * layers; some with a job that fails on purpose) while faults are injected at random — Redis
 * paused (CLIENT PAUSE) and frozen (SIGSTOP), the REST endpoint killed and restarted, the Worker
 * restarted (every Durable Object's memory gone), runners killed and restarted, runners refusing
 * for longer than their backoff; one runner duplicates and reorders its reports throughout, another
 * takes several deliveries in one POST. Then
 * every fault heals, and the invariants are checked and returned.
 */
export async function soak(options: SoakOptions): Promise<SoakReport> {
  const log = options.log ?? (() => {});
  // Flows and faults draw from generators of their own, so each sequence depends on the seed
  // alone, not on how the two loops happened to interleave.
  const random = { flows: mulberry32(options.seed), faults: mulberry32(options.seed ^ 0x9e3779b9) };
  const stack = await startPrivateStack("chaos");
  try {
    return await run(stack, options, random, log);
  } finally {
    await stack.stop();
  }
}

async function run(
  stack: PrivateStack,
  options: SoakOptions,
  random: { flows: Random; faults: Random },
  log: (line: string) => void,
): Promise<SoakReport> {
  const statuses: number[] = [];
  const recording = async (request: Request) => {
    const response = await fetch(request);
    statuses.push(response.status);
    return response;
  };
  const jwk = await generateKeyPair();
  const anonymous = new CoordinatorClient({ baseUrl: stack.url, fetch: recording });
  const actor = await anonymous.registerActor(jwk);
  const client = anonymous.as(await signerFromJwk(jwk, actorKeyId(actor.id)));
  const ctx = (await client.createContext()).id;

  const runners: SoakRunner[] = [];
  // The third takes up to 4 deliveries in one POST, the fourth 3 a POST answered with their
  // results: batches and results in answers meet the same faults.
  const kinds = [
    { WORK_MS: "50" },
    { WORK_MS: "100", CHAOS: "1" },
    { WORK_MS: "30", DELIVERIES_PER_POST: "4" },
    { WORK_MS: "20", DELIVERIES_PER_POST: "3", INLINE: "1" },
  ];
  for (const [i, extra] of kinds.entries()) {
    const refuse = path.join(stack.dir, `refuse-${i}`);
    const registered = await stack.registerTestRunner(
      client,
      ctx,
      { ...extra, FAIL_MATCH: "doomed", REPORT_RETRY_MS: "90000", REFUSE_FILE: refuse },
      4 + i,
    );
    runners.push({ registered, procs: [await registered.start()], refuse });
  }

  const flows: { view: FlowView; doomed: string[] }[] = [];
  const faults: string[] = [];
  const until = Date.now() + options.durationMs;
  /** Set when either loop fails: the other stops too, before the stack is taken down. */
  let halted = false;
  const going = () => !halted && Date.now() < until;
  const submitter = (async () => {
    for (let n = 0; going(); n++) {
      const { jobs, doomed } = flowShape(random.flows, `f${n}`, RETRIES);
      const body: FlowSubmissionInput = { start: true, timeouts: TIMEOUTS, jobs };
      const view = await submitWithKey(client, ctx, body, `soak-${options.seed}-${n}`);
      flows.push({ view, doomed });
      await sleep(300 + random.flows() * 1_200);
    }
  })();
  const injector = (async () => {
    await sleep(2_000);
    while (going()) {
      const fault = await inject(stack, runners, random.faults);
      faults.push(fault);
      log(`fault: ${fault}`);
      await sleep(2_000 + random.faults() * 6_000);
    }
  })();
  const loops = await Promise.allSettled([
    submitter.catch((e: unknown) => ((halted = true), Promise.reject(e))),
    injector.catch((e: unknown) => ((halted = true), Promise.reject(e))),
  ]);
  await heal(stack, runners);
  const failed = loops.find((l): l is PromiseRejectedResult => l.status === "rejected");
  if (failed) throw failed.reason;
  log(`faults over; ${flows.length} flows submitted; settling`);

  const ends = await settle(stack, client, ctx, flows, options.settleMs ?? 240_000);
  const invariants = await check({ stack, client, ctx, runners, flows, ends, statuses });
  const streams = await checkStreams(stack.url, await signerFromJwk(jwk, actorKeyId(actor.id)), ctx, ends);
  invariants.push({ name: "every flow's stream is whole and tells how it ended", ...streams });
  return { seed: options.seed, flows: flows.length, faults, invariants, ok: invariants.every((i) => i.held) };
}

/**
 * Submits with an Idempotency-Key, retrying with the same key while storage is away (503) or the
 * Worker cannot be reached (it is being restarted).
 */
async function submitWithKey(
  client: CoordinatorClient,
  ctx: number,
  body: FlowSubmissionInput,
  key: string,
): Promise<FlowView> {
  for (;;) {
    try {
      return await client.submitFlow(ctx, body, { idempotencyKey: key });
    } catch (error) {
      const unreachable = error instanceof TypeError; // fetch failed: nothing listens right now
      if (!unreachable && (!(error instanceof ApiError) || error.status !== 503)) throw error;
      await sleep(500);
    }
  }
}

/** Injects one fault, chosen by the seed, and waits for it to heal (a refusal heals in the background). */
async function inject(stack: PrivateStack, runners: SoakRunner[], random: Random): Promise<string> {
  const pick = Math.floor(random() * 6);
  const ms = (min: number, max: number) => Math.round(min + random() * (max - min));
  switch (pick) {
    case 0: {
      const pause = ms(3_000, 10_000);
      await stack.pauseClients(pause);
      await sleep(pause);
      return `Redis paused ${pause} ms (CLIENT PAUSE)`;
    }
    case 1: {
      const frozen = ms(3_000, 8_000);
      stack.pauseRedis();
      await sleep(frozen);
      stack.continueRedis();
      return `redis-server frozen ${frozen} ms (SIGSTOP)`;
    }
    case 2: {
      const down = ms(2_000, 6_000);
      await stack.stopRest();
      await sleep(down);
      await stack.restartRest();
      return `REST endpoint killed for ${down} ms`;
    }
    case 3:
      await stack.restartWorker();
      return "Worker restarted (every Durable Object's memory gone)";
    case 4: {
      const runner = runners[Math.floor(random() * runners.length)] as SoakRunner;
      const down = ms(1_000, 4_000);
      await runner.procs[runner.procs.length - 1]?.kill();
      await sleep(down);
      runner.procs.push(await runner.registered.start());
      return `runner ${runner.registered.id} killed (SIGKILL) for ${down} ms`;
    }
    default: {
      const runner = runners[Math.floor(random() * runners.length)] as SoakRunner;
      const refusing = ms(5_000, 35_000);
      writeFileSync(runner.refuse, "down");
      setTimeout(() => rmSync(runner.refuse, { force: true }), refusing);
      return `runner ${runner.registered.id} refusing (503) for ${refusing} ms`;
    }
  }
}

/** Ends every fault that may still be on. */
async function heal(stack: PrivateStack, runners: SoakRunner[]): Promise<void> {
  stack.continueRedis();
  await stack.restartRest();
  for (const runner of runners) rmSync(runner.refuse, { force: true });
}

/** Waits for every flow to end (sweeping now and then to hurry the backstop); the views by flow id. */
async function settle(
  stack: PrivateStack,
  client: CoordinatorClient,
  ctx: number,
  flows: { view: FlowView }[],
  settleMs: number,
): Promise<Map<number, FlowView>> {
  const ends = new Map<number, FlowView>();
  const deadline = Date.now() + settleMs;
  while (Date.now() < deadline && ends.size < flows.length) {
    for (const { view } of flows) {
      if (ends.has(view.id)) continue;
      const now = await client.loadFlow(ctx, view.id).catch(() => undefined);
      if (now && (now.status === "finished" || now.status === "error")) ends.set(view.id, now);
    }
    if (ends.size < flows.length) {
      await stack.sweep().catch(() => undefined);
      await sleep(2_000);
    }
  }
  return ends;
}

/** What the soak ran, for its invariants to be checked against. */
interface SoakOutcome {
  stack: PrivateStack;
  client: CoordinatorClient;
  ctx: number;
  runners: SoakRunner[];
  flows: { view: FlowView; doomed: string[] }[];
  ends: Map<number, FlowView>;
  /** The statuses of the answers the soak's own requests got. */
  statuses: number[];
}

/** The soak's invariants, each checked on its own, in the order they are printed. */
async function check(run: SoakOutcome): Promise<Invariant[]> {
  return [
    await everyFlowEnded(run),
    endedAsTheyMust(run),
    ranAtMostRetries(run),
    await noSlotLeaked(run),
    await nothingLeftWaiting(run),
    noServerError(run),
  ];
}

async function everyFlowEnded({ stack, client, ctx, flows, ends }: SoakOutcome): Promise<Invariant> {
  const open = flows.filter((f) => !ends.has(f.view.id)).map((f) => f.view.id);
  const stuck = await Promise.all(open.slice(0, 3).map((id) => describeFlow(stack, client, ctx, id)));
  return {
    name: "every flow reached its end",
    held: open.length === 0,
    detail:
      open.length === 0
        ? `${flows.length} flows ended`
        : `still running: flows ${open.join(", ")}; ${stuck.join("; ")}`,
  };
}

function endedAsTheyMust({ runners, flows, ends }: SoakOutcome): Invariant {
  const wrong: string[] = [];
  const outputs = runners.flatMap((r) => r.procs.map((p) => p.output())).join("\n");
  /**
   * A doomed job's last attempt may end by a fault instead of by its own failure: its runner was
   * killed holding it (it went silent), or never took it. That is a right ending only if no
   * runner had its failure answered: an answered report the flow then ignored would be a bug.
   */
  const endedByFault = (flowId: number, job: string, reason: string) => {
    const attempt = /^attempt (\d+) (went silent|was not delivered)/.exec(reason)?.[1];
    if (!attempt) return false;
    const answered = new RegExp(`^answered result ${job} flow ${flowId} attempt ${attempt} 200`, "m");
    return !answered.test(outputs);
  };
  for (const { view, doomed } of flows) {
    const end = ends.get(view.id);
    if (!end) continue;
    if (doomed.length === 0 && end.status !== "finished")
      wrong.push(`flow ${view.id} ${end.status}: ${end.error?.reason}`);
    const reason = end.error?.reason ?? "";
    if (
      doomed.length > 0 &&
      (end.status !== "error" ||
        !doomed.includes(end.error?.name ?? "") ||
        !(/failed on purpose/.test(reason) || endedByFault(view.id, end.error?.name ?? "", reason)))
    ) {
      wrong.push(
        `flow ${view.id} (doomed ${doomed.join(", ")}) ${end.status}: ${end.error?.name}: ${end.error?.reason}`,
      );
    }
  }
  const doomedFlows = flows.filter((f) => f.doomed.length > 0).length;
  return {
    name: "each flow ended as it must: finished, or error naming the job that failed on purpose (or whose last attempt a fault ended, no report of it answered)",
    held: wrong.length === 0,
    detail:
      wrong.length === 0
        ? `${flows.length - doomedFlows} finished, ${doomedFlows} errored on their doomed job`
        : wrong.slice(0, 5).join("; "),
  };
}

function ranAtMostRetries({ runners }: SoakOutcome): Invariant {
  const runs = runsIn(...runners.flatMap((r) => r.procs.map((p) => p.output())));
  const counts = new Map<string, number>();
  for (const r of runs) counts.set(`${r.flow}:${r.job}`, (counts.get(`${r.flow}:${r.job}`) ?? 0) + 1);
  const over = [...counts].filter(([, n]) => n > RETRIES + 1);
  return {
    name: `each job ran at most retries + 1 = ${RETRIES + 1} times (counted at the runners)`,
    held: over.length === 0,
    detail:
      over.length === 0
        ? `${runs.length} runs of ${counts.size} jobs, at most ${Math.max(0, ...counts.values())} of one job`
        : over
            .slice(0, 5)
            .map(([k, n]) => `${k} ran ${n} times`)
            .join("; "),
  };
}

async function noSlotLeaked({ stack, ctx, runners }: SoakOutcome): Promise<Invariant> {
  const slotsHeld = () =>
    Promise.all(runners.map((r) => stack.redis.exec<number>(["ZCARD", stack.keys.runnerSlots(ctx, r.registered.id)])));
  const slots = await drained(stack, slotsHeld, 60_000, "every slot free");
  return {
    name: "no runner slot leaked",
    held: slots.every((n) => n === 0),
    detail: `slots held: ${slots.join(", ")}`,
  };
}

async function nothingLeftWaiting({ stack, ctx }: SoakOutcome): Promise<Invariant> {
  const waiting = () =>
    Promise.all([
      queuedIn(stack.redis, stack.keys, ctx),
      stack.redis.exec<number>(["LLEN", stack.keys.msgOut(ctx)]),
      stack.redis.exec<number>(["ZCARD", stack.keys.inflight(ctx)]),
    ]);
  const left = await drained(stack, waiting, 90_000, "nothing waiting");
  return {
    name: "no message left waiting or in flight",
    held: left.every((n) => n === 0),
    detail: `queue ${left[0]}, msg_out ${left[1]}, in flight ${left[2]}`,
  };
}

function noServerError({ stack, runners, statuses }: SoakOutcome): Invariant {
  const output = runners.flatMap((r) => r.procs.map((p) => p.output()));
  const runnerAnswers = output.flatMap((o) =>
    [...o.matchAll(/^answered \S+ .* (\d{3}) \S+$/gm)].map((m) => Number(m[1])),
  );
  const fives = [...statuses, ...runnerAnswers].filter((s) => s >= 500 && s !== 503);
  const crashes = stack
    .workerLog()
    .split("\n")
    .filter((l) => /FlowCoordinator:|Internal error|Uncaught/.test(l));
  const fiveOhThrees = [...statuses, ...runnerAnswers].filter((s) => s === 503).length;
  const logged = crashes.length > 0 ? `; the Worker logged: ${crashes.slice(0, 3).join(" | ")}` : "";
  return {
    name: "no 5xx but 503 while storage was away; no internal error in the Worker's log",
    held: fives.length === 0 && crashes.length === 0,
    detail: `${statuses.length + runnerAnswers.length} answers, ${fiveOhThrees} × 503, other 5xx: ${fives.length}${logged}`,
  };
}

/**
 * The counts `read` gives, once they are all 0: between reads a sweep hurries along what is due.
 * Still not all 0 after `timeoutMs`: the counts as they stand, for the invariant to report.
 */
async function drained(
  stack: PrivateStack,
  read: () => Promise<number[]>,
  timeoutMs: number,
  what: string,
): Promise<number[]> {
  return eventually(
    async () => {
      const counts = await read();
      if (counts.every((n) => n === 0)) return counts;
      await stack.sweep().catch(() => undefined);
      return undefined;
    },
    timeoutMs,
    2_000,
    what,
  ).catch(() => read());
}

function sleep(ms: number): Promise<void> {
  return new Promise((r) => setTimeout(r, ms));
}
