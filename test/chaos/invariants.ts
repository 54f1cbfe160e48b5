import type { CoordinatorClient } from "../../shared/client/index.js";
import type { FlowView } from "../../shared/model/index.js";
import { eventually } from "../support/eventually.js";
import { runsIn } from "../support/flow-runs.js";
import { queuedIn } from "../support/prefix.js";
import type { PrivateStack } from "../support/private-stack.js";
import { describeFlow } from "./describe.js";
import type { RegisteredRunner } from "../support/runner-process.js";
import type { TestRunnerProcess } from "../support/private-stack.js";

// The soak's invariants, each checked on its own: its promise, printed at the end of every run.

/** One invariant as checked at the end: what it says, whether it held, and what was seen. */
export interface Invariant {
  name: string;
  held: boolean;
  detail: string;
}

/** Retries each job gets: enough to outlast a runner killed under it a few times. */
export const RETRIES = 4;

/** A runner of the soak: its registration, its processes so far, and its switch to refuse work. */
export interface SoakRunner {
  registered: RegisteredRunner<TestRunnerProcess>;
  procs: TestRunnerProcess[];
  /** The file whose presence makes it answer 503 (a runner that is down for a while). */
  refuse: string;
}

/** What the soak ran, for its invariants to be checked against. */
export interface SoakOutcome {
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
export async function check(run: SoakOutcome): Promise<Invariant[]> {
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
