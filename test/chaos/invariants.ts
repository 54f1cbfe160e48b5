import { writeFileSync } from "node:fs";
import type { RequestSigner } from "../../shared/auth/index.js";
import type { CoordinatorClient } from "../../shared/client/index.js";
import type { FlowView } from "../../shared/model/index.js";
import { eventually } from "../support/eventually.js";
import { runsIn } from "../support/flow-runs.js";
import { queuedIn } from "../support/prefix.js";
import { queuedOnCluster, type RedisCluster } from "../support/redis-cluster.js";
import type { PrivateStack } from "../support/private-stack.js";
import { describeFlow } from "./describe.js";
import type { RegisteredRunner } from "../support/runner-process.js";
import type { TestRunnerProcess } from "../support/private-stack.js";
import {
  everyWaitEndedOnce,
  noEventLost,
  nothingStuck,
  resumedAddsUp,
  strayEventsResumedNothing,
  waitTookItsEvent,
  type FaultSpan,
  type Found,
} from "./reactions.js";
import { judgeGrowth } from "./growth.js";
import { idsGivenOnce } from "./ids.js";
import { failedAsItMay, judgeFlow } from "./rules.js";
import { sagasUnwound } from "./sagas.js";
import { childrenEnded, describeOpen, gatherChildren, noChildOutlived, OUTLIVE_S, type ChildSeen } from "./children.js";
import type { FlowPlan } from "./shapes.js";
import { checkStreams } from "./stream-check.js";
import type { EventTraffic } from "./traffic.js";

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

/** A flow the soak submitted: as submitted, and its plan (its doomed jobs, conditions, waits, sleeps). */
export interface SoakFlow {
  view: FlowView;
  plan: FlowPlan;
}

/** What the soak ran, for its invariants to be checked against. */
export interface SoakOutcome {
  stack: PrivateStack;
  client: CoordinatorClient;
  /** The soak's actor's signer, to read the flows' streams. */
  signer: RequestSigner;
  ctx: number;
  runners: SoakRunner[];
  flows: SoakFlow[];
  ends: Map<number, FlowView>;
  /** The statuses of the answers the soak's own requests got. */
  statuses: number[];
  /** The events sent, and what the views showed of waits and sleeps meanwhile. */
  traffic: EventTraffic;
  faults: FaultSpan[];
  /** Each flow's deadline (`timeouts.flow`), in seconds: a flow that needs it was stuck. */
  budgetS: number;
  /** Submissions refused 409 "flow id N is taken by another flow" (and sent again with a new key). */
  taken: string[];
  /** The Redis Cluster the stack runs over, if it does (its queues are found on their master). */
  cluster?: RedisCluster;
}

/** What the checks found: the invariants, in the order they are printed, and the child flows they judged. */
export interface Checked {
  invariants: Invariant[];
  children: ChildSeen[];
}

/**
 * The soak's invariants, each checked on its own, in the order they are printed. The flows are
 * read again once every slot is free and nothing is in flight (attempts in flight when a flow
 * failed end after it), and their streams once: the views and streams the others judge. Child
 * flows (the context's flows with a parent) are waited for first, as their ends follow their
 * parents' (a cancel on its way, a child's compensations), and read again with the others.
 */
export async function check(run: SoakOutcome): Promise<Checked> {
  const ended = await everyFlowEnded(run);
  await gatherChildren(run.stack, run.client, run.ctx, RETRIES);
  const slots = await noSlotLeaked(run);
  const waiting = await nothingLeftWaiting(run);
  const finals = await finalViews(run);
  const children = await gatherChildren(run.stack, run.client, run.ctx, RETRIES);
  const views = new Map([...finals, ...children.map((c) => [c.view.id, c.view] as const)]);
  const streams = await checkStreams(run.stack.url, run.signer, run.ctx, views);
  const reactions = { flows: run.flows, finals, streams: streams.events, sends: run.traffic.sends, faults: run.faults };
  const outputs = run.runners.flatMap((r) => r.procs.map((p) => p.output()));
  // The runners' lines, kept for a look after the run when CHAOS_OUTPUTS names a file, and the
  // Worker's log beside them (<file>.worker.log: its warnings tell conflicts and unknown outcomes).
  if (process.env.CHAOS_OUTPUTS) {
    writeFileSync(process.env.CHAOS_OUTPUTS, outputs.join("\n"));
    writeFileSync(`${process.env.CHAOS_OUTPUTS}.worker.log`, run.stack.workerLog());
  }
  const records = { redis: run.stack.redis, keys: run.stack.keys, ctx: run.ctx };
  const family = { children, views, outputs: outputs.join("\n") };
  const open = await describeOpen(run.stack, run.client, run.ctx, children);
  const judged = children.flatMap((c) => (c.plan ? [{ view: c.view, plan: c.plan }] : []));
  const invariants = [
    ended,
    {
      name: "no flow id given to two flows (a context's id counter never went back: a stalled master's failover on a Redis Cluster can do that)",
      ...idsGivenOnce(run.flows, views, outputs, run.taken),
    },
    endedAsTheirRulesSay(run, finals),
    {
      name: "every child flow ended as its template's rules say, of the version asked for, and its parent's job with it (finished with its result, or in error: it failed, or the job was stopped); one child per attempt",
      ...withDescribed(childrenEnded(family), open),
    },
    {
      name: `no child outlived a cancelled or failed parent: stopped (ended, or unwinding) within ${OUTLIVE_S} s of its job's end, plus outages`,
      ...(await noChildOutlived(family, records, run.faults)),
    },
    ranAtMostRetries(run, children),
    slots,
    waiting,
    {
      name: "every flow's stream (children's too) is whole and tells how it ended",
      held: streams.held,
      detail: streams.detail,
    },
    {
      name: "every wait ended exactly once (one end in its stream, the one its view shows)",
      ...everyWaitEndedOnce(reactions),
    },
    {
      name: "a wait that took an event took one sent with its name and key (never one for another key), before it ended",
      ...waitTookItsEvent(reactions),
    },
    {
      name: "events for a wrong key or sent after their wait ended resumed nothing; an id sent again is a duplicate; no send refused",
      ...strayEventsResumedNothing(reactions),
    },
    { name: "the answers' resumed add up to the waits events resumed", ...resumedAddsUp(reactions) },
    { name: "no event sent to a waiting wait was lost (a wait timed out only without one)", ...noEventLost(reactions) },
    { name: "no flow, wait or sleep stayed stuck", ...nothingStuck(reactions, run.budgetS) },
    {
      name: "every saga (children's too) unwound as promised: each compensation at most retries + 1 times, only for a job that finished, after the flow unwound and after the compensations downstream ended well; compensated or compensation_failed naming those in error; none ran in a flow that finished",
      ...(await sagasUnwound([...run.flows, ...judged], views, records, outputs)),
    },
    noRunnerForWaitOrSleep(run, views),
    noServerError(run),
  ];
  return { invariants, children };
}

/** A finding, with what was seen of the children that did not end. */
function withDescribed(found: Found, open: string[]): Found {
  return open.length === 0 ? found : { held: false, detail: `${found.detail}; ${open.join("; ")}` };
}

/** Every ended flow read again (its first end's view when it cannot be). */
async function finalViews({ client, ctx, ends }: SoakOutcome): Promise<Map<number, FlowView>> {
  const finals = new Map<number, FlowView>();
  const ids = [...ends.keys()];
  for (let i = 0; i < ids.length; i += 8) {
    await Promise.all(
      ids.slice(i, i + 8).map(async (id) => {
        finals.set(id, (await client.loadFlow(ctx, id).catch(() => undefined)) ?? (ends.get(id) as FlowView));
      }),
    );
  }
  return finals;
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

function endedAsTheirRulesSay({ runners, flows }: SoakOutcome, finals: Map<number, FlowView>): Invariant {
  const wrong: string[] = [];
  const outputs = runners.flatMap((r) => r.procs.map((p) => p.output())).join("\n");
  const ends = { finished: 0, skips: 0, doomed: 0, waits: 0, cleanups: 0 };
  for (const { view, plan } of flows) {
    const end = finals.get(view.id);
    if (!end) continue;
    wrong.push(...judgeFlow(plan, end, failedAsItMay(outputs, view.id)), ...judgeGrowth(plan, end));
    if (end.status === "finished") ends.finished++;
    if (end.status === "finished" && end.jobs.some((j) => j.status === "skipped")) ends.skips++;
    const failed = plan.jobs.find((j) => j.name === end.error?.name);
    const failedRun = end.status !== "finished";
    if (failedRun && failed?.wait) ends.waits++;
    else if (failedRun && end.error?.job !== 0) ends.doomed++;
    const cleanups = plan.jobs.filter((j) => j.needs === "all_done" && j.script !== undefined).map((j) => j.name);
    if (failedRun) ends.cleanups += end.jobs.filter((j) => cleanups.includes(j.key) && j.status === "finished").length;
  }
  return {
    name: "each flow ended as its rules say: every job by its needs, when and kind; finished, or failed (in error, or unwound when it has compensations) naming a job that may fail it and failed so (on purpose, by a fault no report of it answered, or a wait's timeout), or cancelled as planned; clean-ups ran; each map ended with one instance per item, the jobs a result added joined once",
    held: wrong.length === 0,
    detail:
      wrong.length === 0
        ? `${ends.finished} finished (${ends.skips} with skipped jobs), ${ends.doomed} failed on a doomed job, ${ends.waits} on a wait's timeout; ${ends.cleanups} clean-ups ran in failed flows`
        : wrong.slice(0, 5).join("; "),
  };
}

/**
 * No runner slot was held by a wait, a sleep or a child-flow job (children's too): no runner was
 * given one (nor a job its rules skipped), as the runners' lines of every delivery say (`ran`,
 * `inline`, `duplicate`), and no view the traffic read showed one with a runner or a delivery.
 */
function noRunnerForWaitOrSleep({ runners, traffic }: SoakOutcome, views: Map<number, FlowView>): Invariant {
  const never = new Map<string, string>();
  const kinds: Record<string, string> = { wait: "wait", sleep: "sleep", flow: "child-flow job" };
  for (const view of views.values())
    for (const j of view.jobs) {
      const kind = kinds[j.kind] ?? (j.status === "skipped" ? "skipped job" : undefined);
      if (kind) never.set(`${view.id}:${j.key}`, kind);
    }
  const lines = runners.flatMap((r) => r.procs.flatMap((p) => p.output().split("\n")));
  const deliveries = lines.flatMap((l) => {
    const m = /^(?:ran|inline|duplicate) (\S+) flow (\d+) attempt (\d+)/.exec(l);
    return m ? [`${m[2]}:${m[1]}`] : [];
  });
  const wrong = deliveries.flatMap((d) => (never.has(d) ? [`${never.get(d)} ${d} was delivered to a runner`] : []));
  wrong.push(...traffic.seen);
  const count = (kind: string) => [...never.values()].filter((k) => k === kind).length;
  return {
    name: "no runner slot held by a wait, a sleep or a child-flow job: none delivered to a runner (nor a skipped job), none shown with a runner",
    held: wrong.length === 0,
    detail:
      wrong.length === 0
        ? `${deliveries.length} deliveries, none of ${count("wait")} waits, ${count("sleep")} sleeps, ${count("child-flow job")} child-flow jobs, ${count("skipped job")} skipped jobs; ${traffic.looks} views read while they ran`
        : wrong.slice(0, 5).join("; "),
  };
}

/**
 * Each job ran at most retries + 1 times, counted at the runners by flow and job: the jobs of
 * children of one template have the same names, and each child is a flow of its own (the runners
 * print the child's id), so each child's jobs are counted apart.
 */
function ranAtMostRetries({ runners }: SoakOutcome, children: ChildSeen[]): Invariant {
  const runs = runsIn(...runners.flatMap((r) => r.procs.map((p) => p.output())));
  const counts = new Map<string, number>();
  for (const r of runs) counts.set(`${r.flow}:${r.job}`, (counts.get(`${r.flow}:${r.job}`) ?? 0) + 1);
  const over = [...counts].filter(([, n]) => n > RETRIES + 1);
  const childIds = new Set(children.map((c) => c.view.id));
  const inChildren = runs.filter((r) => childIds.has(r.flow));
  const childJobs = new Set(inChildren.map((r) => `${r.flow}:${r.job}`));
  const ranIn = new Set(inChildren.map((r) => r.flow));
  return {
    name: `each job ran at most retries + 1 = ${RETRIES + 1} times (counted at the runners, by flow and job: a child flow's jobs apart from its siblings')`,
    held: over.length === 0,
    detail:
      over.length === 0
        ? `${runs.length} runs of ${counts.size} jobs (${inChildren.length} runs of ${childJobs.size} jobs in ${ranIn.size} child flows), at most ${Math.max(0, ...counts.values())} of one job`
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

async function nothingLeftWaiting({ stack, ctx, cluster }: SoakOutcome): Promise<Invariant> {
  const waiting = () =>
    Promise.all([
      cluster ? queuedOnCluster(cluster, stack.keys, ctx) : queuedIn(stack.redis, stack.keys, ctx),
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
