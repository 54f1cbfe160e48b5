import path from "node:path";
import { actorKeyId, generateKeyPair } from "../../shared/auth/index.js";
import { ApiError, CoordinatorClient, signerFromJwk } from "../../shared/client/index.js";
import type { FlowSubmissionInput } from "../../shared/flow/index.js";
import type { FlowView } from "../../shared/model/index.js";
import { startPrivateStack, type PrivateStack } from "../support/private-stack.js";
import { mulberry32, type Random } from "../support/random.js";
import type { RedisCluster } from "../support/redis-cluster.js";
import { check, RETRIES, type Invariant, type SoakFlow, type SoakRunner } from "./invariants.js";
import { LOOKBACK_S, type FaultSpan } from "./reactions.js";
import { FAIL_MATCH, flowShape, type FlowPlan } from "./shapes.js";
import { growthShape } from "./growth.js";
import { putTemplates, withChildren } from "./templates.js";
import { EventTraffic } from "./traffic.js";
import { clusterFaults, heal, inject, serverFaults, sleep, type Failover } from "./faults.js";

export type { Invariant } from "./invariants.js";

/** How a soak runs: its seed (the same seed, the same flows and faults in the same order) and length. */
export interface SoakOptions {
  seed: number;
  /** How long flows are submitted and faults injected, in ms; then everything heals and settles. */
  durationMs: number;
  /** How long the flows may take to end once the faults stopped. */
  settleMs?: number;
  log?: (line: string) => void;
  /**
   * A Redis Cluster to run over (test/support/redis-cluster.ts) instead of a redis-server of the
   * soak's own: its REST endpoint fronts the cluster and its Worker has STORAGE_CLUSTER. Redis
   * paused and frozen become the context's master paused and every master paused (faults.ts).
   */
  cluster?: RedisCluster;
  /** Over a cluster: the master of the context's slot fails once, half-way through (faults.ts). */
  failover?: Failover;
}

export interface SoakReport {
  seed: number;
  flows: number;
  faults: string[];
  /**
   * What reacted: waits, sleeps, `when`s, clean-ups, and the events sent (each send once, tries
   * apart); sagas (flows with compensations), and those cancelled with `compensate`.
   */
  reactive: {
    waits: number;
    sleeps: number;
    whens: number;
    cleanups: number;
    events: number;
    tries: number;
    sagas: number;
    cancels: number;
  };
  /** What grew: maps and their items, jobs results added, and added jobs refused on purpose. */
  growth: { maps: number; items: number; added: number; refused: number };
  /**
   * Child flows: the child-flow jobs planned, the child flows found (nested: depth 2), those
   * cancelled with their parent, those that failed (on purpose, or nested in one that did), and
   * the flows with children cancelled by the soak.
   */
  children: {
    jobs: number;
    flows: number;
    nested: number;
    cancelledWithParent: number;
    failed: number;
    cancels: number;
  };
  invariants: Invariant[];
  ok: boolean;
}

/** Every flow's budget (`timeouts.flow`): past it, it ends in error, and the soak calls it stuck. */
const BUDGET_S = 300;
const TIMEOUTS = {
  timeout: 90,
  timeout_ack: 15,
  timeout_result: 30,
  retry_base_ms: 200,
  retry_cap_ms: 3_000,
  flow: BUDGET_S,
};

/**
 * A seeded, bounded soak on the real local stack: flows of varied shapes (chains, diamonds, fans,
 * layers; some with a job that fails on purpose; most with waits for events, sleeps, `when`s,
 * `needs`, `allow_failure` and clean-ups; a quarter that grow while they run: maps, and jobs
 * whose results add jobs; some whose jobs are child flows, nested too, from templates the soak
 * stores first, some of them cancelled while their children run: templates.ts) and events for
 * their waits (sent once, twice, early,
 * late, for a wrong key: traffic.ts) while faults are injected at random — Redis
 * paused (CLIENT PAUSE) and frozen (SIGSTOP), the REST endpoint killed and restarted, the Worker
 * restarted (every Durable Object's memory gone), runners killed and restarted, runners refusing
 * for longer than their backoff; one runner duplicates and reorders its reports throughout, another
 * takes several deliveries in one POST. Over a Redis Cluster (`cluster`), its storage faults strike
 * the cluster's masters, and one of them fails over half-way through (`failover`). Then
 * every fault heals, and the invariants are checked and returned.
 */
export async function soak(options: SoakOptions): Promise<SoakReport> {
  const log = options.log ?? (() => {});
  // Flows, faults and the events' fates draw from generators of their own, so each sequence
  // depends on the seed alone, not on how the loops happened to interleave.
  const random = {
    flows: mulberry32(options.seed),
    faults: mulberry32(options.seed ^ 0x9e3779b9),
    events: mulberry32(options.seed ^ 0x85ebca6b),
  };
  const stack = await startPrivateStack("chaos", options.cluster ? { cluster: { seeds: options.cluster.seeds } } : {});
  try {
    return await run(stack, options, random, log);
  } finally {
    await stack.stop();
  }
}

async function run(
  stack: PrivateStack,
  options: SoakOptions,
  random: { flows: Random; faults: Random; events: Random },
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
  const signer = await signerFromJwk(jwk, actorKeyId(actor.id));
  const client = anonymous.as(signer);
  const ctx = (await client.createContext()).id;
  // Events that come before their wait starts are kept for it (an early event is sent so).
  await client.setLimits(ctx, { event_lookback: LOOKBACK_S });
  // The templates child-flow jobs start, stored before any fault.
  log(`templates: ${(await putTemplates(client, ctx, RETRIES, TIMEOUTS)).join(", ")}`);

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
      { ...extra, FAIL_MATCH, REPORT_RETRY_MS: "90000", REFUSE_FILE: refuse },
      4 + i,
    );
    runners.push({ registered, procs: [await registered.start()], refuse });
  }

  const storage = options.cluster ? clusterFaults(stack, options.cluster, ctx) : serverFaults(stack);
  const flows: SoakFlow[] = [];
  /** Submissions refused 409 as their id was a live flow's (a context's id counter gone back). */
  const taken: string[] = [];
  const faults: FaultSpan[] = [];
  const traffic = new EventTraffic(client, ctx);
  const cancels: Promise<void>[] = [];
  const watching = traffic.run();
  const until = Date.now() + options.durationMs;
  /** Set when either loop fails: the other stops too, before the stack is taken down. */
  let halted = false;
  const going = () => !halted && Date.now() < until;
  const submitter = (async () => {
    for (let n = 0; going(); n++) {
      // One flow in four grows while it runs: a map, or a job whose result adds jobs; of the
      // others, one in three has child flows.
      const grows = random.flows() < 0.25;
      const plan = grows
        ? growthShape(random.flows, `f${n}`, RETRIES)
        : withChildren(random.flows, flowShape(random.flows, `f${n}`, RETRIES, random.events), `f${n}`);
      await traffic.beforeSubmit(plan);
      const body: FlowSubmissionInput = { start: true, timeouts: TIMEOUTS, env_vars: plan.env, jobs: plan.jobs };
      const view = await submitWithKey(client, ctx, body, `soak-${options.seed}-${n}`, taken);
      flows.push({ view, plan });
      traffic.watch(plan, view.id);
      if (plan.cancel) cancels.push(cancelLater(client, ctx, view.id, plan.cancel, log));
      await sleep(300 + random.flows() * 1_200);
    }
  })();
  // The failover comes once, at the first fault past half-way, before that fault.
  let failover = options.cluster && storage.failover ? options.failover : undefined;
  const half = Date.now() + options.durationMs / 2;
  const injector = (async () => {
    await sleep(2_000);
    while (going()) {
      const from = Date.now();
      const strike = failover && from >= half ? failover : undefined;
      if (strike) failover = undefined;
      const fault =
        strike && storage.failover
          ? await storage.failover(strike)
          : await inject(stack, storage, runners, random.faults);
      faults.push({ from, to: Date.now(), what: fault });
      log(`fault: ${fault}`);
      await sleep(2_000 + random.faults() * 6_000);
    }
  })();
  const loops = await Promise.allSettled([
    submitter.catch((e: unknown) => ((halted = true), Promise.reject(e))),
    injector.catch((e: unknown) => ((halted = true), Promise.reject(e))),
  ]);
  await heal(stack, storage, runners);
  await Promise.all(cancels);
  const failed = loops.find((l): l is PromiseRejectedResult => l.status === "rejected");
  if (failed) {
    traffic.stop(0);
    await watching;
    throw failed.reason;
  }
  log(`faults over; ${flows.length} flows submitted; settling`);

  const ends = await settle(stack, client, ctx, flows, options.settleMs ?? 240_000);
  // Late events go to waits that ended last: the traffic watches them a while more.
  traffic.stop(30_000);
  await watching;
  const { invariants, children } = await check({
    stack,
    client,
    signer,
    ctx,
    runners,
    flows,
    ends,
    statuses,
    traffic,
    faults,
    budgetS: BUDGET_S,
    taken,
    ...(options.cluster ? { cluster: options.cluster } : {}),
  });
  const plans = flows.map((f) => f.plan);
  const reactive = {
    waits: plans.reduce((n, p) => n + p.waits.length, 0),
    sleeps: plans.reduce((n, p) => n + p.sleeps.length, 0),
    whens: plans.reduce((n, p) => n + Object.keys(p.conditions).length, 0),
    cleanups: plans.filter((p) => p.jobs.some((j) => (j.name as string).endsWith("-cleanup"))).length,
    events: traffic.sends.length,
    tries: traffic.sends.reduce((n, s) => n + s.tries.length, 0),
    sagas: plans.filter((p) => p.compensated.length > 0).length,
    cancels: plans.filter((p) => p.cancel?.compensate).length,
  };
  const growth = {
    maps: plans.reduce((n, p) => n + (p.maps?.length ?? 0), 0),
    items: plans.reduce((n, p) => n + (p.maps ?? []).reduce((k, m) => k + m.items, 0), 0),
    added: plans.reduce((n, p) => n + (p.added?.length ?? 0), 0),
    refused: plans.filter((p) => p.refusedGrowth).length,
  };
  const cancelledByParent = (v: FlowView) => /^cancelled: its parent flow /.test(v.error?.reason ?? "");
  const family = {
    jobs: plans.reduce((n, p) => n + (p.children?.length ?? 0), 0),
    flows: children.length,
    nested: children.filter((c) => (c.view.parent?.depth ?? 0) > 1).length,
    cancelledWithParent: children.filter((c) => cancelledByParent(c.view)).length,
    failed: children.filter((c) => c.view.status !== "finished" && !cancelledByParent(c.view)).length,
    cancels: plans.filter((p) => p.cancel && (p.children?.length ?? 0) > 0).length,
  };
  return {
    seed: options.seed,
    flows: flows.length,
    faults: faults.map((f) => f.what),
    reactive,
    growth,
    children: family,
    invariants,
    ok: invariants.every((i) => i.held),
  };
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
  taken: string[],
): Promise<FlowView> {
  for (let again = ""; ;) {
    try {
      return await client.submitFlow(ctx, body, { idempotencyKey: `${key}${again}` });
    } catch (error) {
      // The context's id counter went back (a stalled master's failover): the id given is a live
      // flow's, which the key keeps reserved. Counted (idsGivenOnce), and sent again with a new key.
      const detail = error instanceof ApiError && error.status === 409 ? (error.problem.detail ?? "") : "";
      if (/^flow id \d+ is taken by another flow$/.test(detail)) {
        taken.push(detail);
        again += "+";
        continue;
      }
      const unreachable = error instanceof TypeError; // fetch failed: nothing listens right now
      if (!unreachable && (!(error instanceof ApiError) || error.status !== 503)) throw error;
      await sleep(500);
    }
  }
}

/** The statuses a flow ends in. */
const ENDS: ReadonlySet<string> = new Set(["finished", "error", "compensated", "compensation_failed"]);

/**
 * Cancels a flow (a saga, with `compensate`) `afterMs` after its submission (twice at once,
 * some): a cancel is tried again while storage is away (503) or the Worker cannot be reached; a
 * flow that ended first answers 409, which is fine. The answers' statuses are recorded with every
 * other request's.
 */
async function cancelLater(
  client: CoordinatorClient,
  ctx: number,
  flowId: number,
  cancel: NonNullable<FlowPlan["cancel"]>,
  log: (line: string) => void,
): Promise<void> {
  await sleep(cancel.afterMs);
  const once = async () => {
    for (let n = 0; n < 8; n++) {
      try {
        const view = await client.cancelFlow(ctx, flowId, "the soak cancels this flow", cancel.compensate);
        return log(`flow ${flowId} cancelled${cancel.compensate ? " with compensate" : ""}: ${view.status}`);
      } catch (error) {
        const unreachable = error instanceof TypeError;
        if (!unreachable && (!(error instanceof ApiError) || error.status !== 503))
          return log(`flow ${flowId} not cancelled: ${(error as Error).message}`);
        await sleep(Math.min(4_000, 300 * 2 ** n));
      }
    }
  };
  await Promise.all(cancel.twice ? [once(), once()] : [once()]);
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
      if (now && ENDS.has(now.status)) ends.set(view.id, now);
    }
    if (ends.size < flows.length) {
      await stack.sweep().catch(() => undefined);
      await sleep(2_000);
    }
  }
  return ends;
}
