import type { CoordinatorClient } from "../../shared/client/index.js";
import type { FlowView, JobView } from "../../shared/model/index.js";
import type { PrivateStack } from "../support/private-stack.js";
import { describeFlow } from "./describe.js";
import { judgeGrowth } from "./growth.js";
import type { FaultSpan, Found } from "./reactions.js";
import { failedAsItMay, judgeFlow } from "./rules.js";
import type { Records } from "./sagas.js";
import type { FlowPlan } from "./shapes.js";
import { childPlan, LATEST } from "./templates.js";

// The soak's child flows (templates.ts), judged from the API's views and Redis's records: every
// child ended as its template's rules say and its parent's job with it, and none outlived a
// parent that was cancelled or failed. Children are found as the context's flows with a
// `parent`, so a child whose start raced its job's end (the job never learnt of it) is judged too.

/** A child flow at its end: its view and the plan of the template it was started from (none: not the soak's). */
export interface ChildSeen {
  view: FlowView;
  plan: FlowPlan | undefined;
}

/** The statuses a flow ends in. */
const ENDS: ReadonlySet<string> = new Set(["finished", "error", "compensated", "compensation_failed"]);

/** How long the children may take to end once their top-level flows did (the slowest holds 25 s). */
const CHILDREN_SETTLE_MS = 120_000;

/**
 * How long after its parent's job ended (cancelled, or stopped by its flow's failure) a child may
 * still run, in seconds: the parent's object sends the cancel right after the commit that ended
 * the job; one that does not go through is kept owed in its storage and tried again by its alarm
 * 5 s later (RETRY_SOON_MS, functions/flow/deadlines.ts); 10 s more for a loaded machine and the
 * records' whole seconds. Time storage or the Worker was away meanwhile is added on top.
 */
export const OUTLIVE_S = 15;

/**
 * The context's child flows (every flow with a `parent`, nested ones too), each read once it
 * ended, or as it stands after CHILDREN_SETTLE_MS; a sweep between looks hurries deadlines along.
 */
export async function gatherChildren(
  stack: PrivateStack,
  client: CoordinatorClient,
  ctx: number,
  retries: number,
): Promise<ChildSeen[]> {
  const views = new Map<number, FlowView>();
  const deadline = Date.now() + CHILDREN_SETTLE_MS;
  for (;;) {
    const ids = await childIds(client, ctx);
    const open = ids.filter((id) => !ENDS.has(views.get(id)?.status ?? ""));
    for (let i = 0; i < open.length; i += 8)
      await Promise.all(
        open.slice(i, i + 8).map(async (id) => {
          const view = await client.loadFlow(ctx, id).catch(() => undefined);
          if (view) views.set(id, view);
        }),
      );
    if (ids.every((id) => ENDS.has(views.get(id)?.status ?? "")) || Date.now() > deadline) break;
    await stack.sweep().catch(() => undefined);
    await new Promise((r) => setTimeout(r, 2_000));
  }
  return [...views.values()].sort((a, b) => a.id - b.id).map((view) => ({ view, plan: childPlan(view, retries) }));
}

/** The ids of the context's flows that have a parent (a few pages of the listing; tried again while storage is away). */
async function childIds(client: CoordinatorClient, ctx: number): Promise<number[]> {
  const ids: number[] = [];
  for (let offset = 0, tries = 0; ;) {
    const page = await client.listFlows(ctx, { offset, limit: 500 }).catch(() => undefined);
    if (!page) {
      if (++tries > 10) return ids;
      await new Promise((r) => setTimeout(r, 1_000));
      continue;
    }
    ids.push(...page.items.filter((f) => f.parent !== undefined).map((f) => f.id));
    offset += page.items.length;
    if (page.items.length === 0 || offset >= page.total) return ids;
  }
}

/** What the children's invariants read: the children, every flow's final view by id (parents among them), the runners' lines. */
export interface ChildrenRun {
  children: ChildSeen[];
  views: Map<number, FlowView>;
  outputs: string;
}

/**
 * Every child flow ended as its template's rules say (rules.ts, growth.ts), as the version asked
 * for (the latest when none was), one level deeper than its parent; its parent's job ended with
 * it: finished only with its child finished, with the child's result as `<job>.<key>` and
 * `child_flow_id`; in error saying the child failed, or stopped by its own flow (cancelled, or
 * its flow failed); one child per attempt of a job, and every child a job names is one of its.
 */
export function childrenEnded({ children, views, outputs }: ChildrenRun): Found {
  const wrong: string[] = [];
  const perAttempt = new Map<string, number[]>();
  for (const { view: child, plan } of children) {
    const at = `child flow ${child.id} (${child.status}, of flow ${child.parent?.flow_id} job ${child.parent?.job_id})`;
    if (!ENDS.has(child.status)) wrong.push(`${at} did not end`);
    if (!plan) wrong.push(`${at} was started from ${JSON.stringify(child.template)}, no template of the soak's`);
    else wrong.push(...judgeFlow(plan, child, failedAsItMay(outputs, child.id)), ...judgeGrowth(plan, child));
    const parent = child.parent ? views.get(child.parent.flow_id) : undefined;
    const job = parent?.jobs.find((j) => j.id === child.parent?.job_id);
    if (!child.parent || !parent || job?.kind !== "flow") {
      wrong.push(`${at}: its parent's job is no child-flow job the soak knows`);
      continue;
    }
    const key = `${parent.id}:${job.id}:${child.parent.attempt}`;
    perAttempt.set(key, [...(perAttempt.get(key) ?? []), child.id]);
    if (child.parent.depth !== (parent.parent?.depth ?? 0) + 1) wrong.push(`${at} is at depth ${child.parent.depth}`);
    const asked = job.flow?.version ?? LATEST[job.flow?.template ?? ""];
    if (child.template?.name !== job.flow?.template || child.template?.version !== asked)
      wrong.push(`${at} is of ${JSON.stringify(child.template)}, its job asked ${JSON.stringify(job.flow)}`);
    wrong.push(...jobEndedWithChild(at, job, child));
  }
  for (const [key, ids] of perAttempt)
    if (ids.length > 1) wrong.push(`job ${key} started child flows ${ids.join(", ")}`);
  const known = new Set(children.map((c) => c.view.id));
  for (const flow of views.values())
    for (const job of flow.jobs.filter((j) => j.kind === "flow")) {
      if (job.child_flow_id !== undefined && !known.has(job.child_flow_id))
        wrong.push(`flow ${flow.id} job ${job.key} names child flow ${job.child_flow_id}, no child of the context`);
      if (job.status === "finished" && job.child_flow_id === undefined)
        wrong.push(`flow ${flow.id} job ${job.key} finished without a child flow`);
    }
  const count = (f: (c: FlowView) => boolean) => children.filter((c) => f(c.view)).length;
  return {
    held: wrong.length === 0,
    detail:
      wrong.length > 0
        ? wrong.slice(0, 5).join("; ")
        : `${children.length} child flows (${count((c) => (c.parent?.depth ?? 0) > 1)} nested): ${count((c) => c.status === "finished")} finished, ${count(cancelledByParent)} cancelled with their parent, ${count((c) => c.status !== "finished" && !cancelledByParent(c))} failed on their own; every parent's job ended with its child`,
  };
}

/** How a child-flow job ended with child `child` (the one its attempt started, or one it never learnt of). */
function jobEndedWithChild(at: string, job: JobView, child: FlowView): string[] {
  const wrong: string[] = [];
  const own = child.parent?.attempt === job.attempt;
  if (own && job.child_flow_id !== undefined && job.child_flow_id !== child.id)
    wrong.push(`${at}: its job's attempt started child flow ${job.child_flow_id} too`);
  const stopped = /^(cancelled|stopped): /.test(job.error ?? "");
  const withIt = new RegExp(`^child flow ${child.id} failed: `).test(job.error ?? "");
  if (!own || job.child_flow_id !== child.id) {
    // A child its job never learnt of (the job ended while its start was under way): not its end.
    if (own && job.status === "finished") wrong.push(`${at}: its job finished without it`);
    return wrong;
  }
  if (job.status === "finished") {
    if (child.status !== "finished") wrong.push(`${at}: its job ${job.key} finished`);
    const result = job.result ?? {};
    const missing = Object.entries(child.result).flatMap(([name, values]) =>
      Object.entries(values).flatMap(([k, v]) => (result[`${name}.${k}`] === v ? [] : [`${name}.${k}`])),
    );
    if (result.child_flow_id !== String(child.id) || missing.length > 0)
      wrong.push(`${at}: its job's result ${JSON.stringify(result)} lacks ${missing.join(", ") || "child_flow_id"}`);
  } else if (job.status === "error") {
    if (withIt && child.status === "finished") wrong.push(`${at}: its job says it failed (${job.error})`);
    if (!withIt && !stopped) wrong.push(`${at}: its job ended in error (${job.error}), neither with it nor stopped`);
  } else wrong.push(`${at}: its job ${job.key} is still ${job.status}`);
  return wrong;
}

/** Whether a child was cancelled by its parent (its parent's job ended while it ran). */
function cancelledByParent(child: FlowView): boolean {
  return /^cancelled: its parent flow \d+ ended its job/.test(child.error?.reason ?? "");
}

/**
 * A child never outlives a cancelled or failed parent: when its parent's job ended without it
 * (cancelled, or stopped by its flow's failure), the child stopped (ended, or began to unwind:
 * a child with compensations undoes its work, as a cancel with `compensate` says) within
 * OUTLIVE_S of the job's end (its record's `ended_at`), plus the time storage or the Worker was
 * away in between, and then ended (the other invariant).
 */
export async function noChildOutlived(run: ChildrenRun, records: Records, faults: FaultSpan[]): Promise<Found> {
  const wrong: string[] = [];
  let judged = 0;
  let cancelled = 0;
  let lag = 0;
  for (const { view: child } of run.children) {
    const parent = child.parent ? run.views.get(child.parent.flow_id) : undefined;
    const job = parent?.jobs.find((j) => j.id === child.parent?.job_id);
    if (!parent || !job || job.status !== "error") continue;
    if (new RegExp(`^child flow ${child.id} failed: `).test(job.error ?? "")) continue; // it ended first
    judged++;
    if (cancelledByParent(child)) cancelled++;
    const ended = await records.redis.exec<string | null>([
      "HGET",
      records.keys.job(records.ctx, parent.caller_id, job.id),
      "ended_at",
    ]);
    const jobEnd = ended !== null ? Number(ended) : parent.ended_at;
    const stop = child.compensating_at ?? child.ended_at;
    const at = `child flow ${child.id} of flow ${parent.id} (job ${job.key}: ${job.error})`;
    if (jobEnd === undefined || stop === undefined) {
      wrong.push(`${at}: its job ended at ${jobEnd}, it stopped at ${stop}`);
      continue;
    }
    const away = Math.ceil(outage(faults, jobEnd * 1000, (stop + 1) * 1000) / 1000);
    lag = Math.max(lag, stop - jobEnd);
    if (stop > jobEnd + OUTLIVE_S + away) {
      const faulted = faults.filter((f) => f.to >= jobEnd * 1000 - 5_000 && f.from <= stop * 1000);
      wrong.push(
        `${at} stopped at ${stop} (${child.status}: ${child.error?.reason}), ${stop - jobEnd} s after its job ended at ${jobEnd} (allowed ${OUTLIVE_S} s + ${away} s away; faults then: ${faulted.map((f) => `${f.what} at ${Math.round(f.from / 1000)}`).join(", ") || "none"})`,
      );
    }
  }
  return {
    held: wrong.length === 0,
    detail:
      wrong.length > 0
        ? wrong.slice(0, 5).join("; ")
        : `${judged} children whose job ended without them: ${cancelled} cancelled with their parent, the others ended first; the longest stopped ${lag} s after its job ended`,
  };
}

/** The time faults other than a runner's held storage or the Worker between `from` and `to` (ms). */
function outage(faults: FaultSpan[], from: number, to: number): number {
  return faults
    .filter((f) => !f.what.startsWith("runner"))
    .reduce((ms, f) => ms + Math.max(0, Math.min(f.to, to) - Math.max(f.from, from)), 0);
}

/** A few children that did not end, described (their jobs, Redis's records, the Worker's lines). */
export async function describeOpen(
  stack: PrivateStack,
  client: CoordinatorClient,
  ctx: number,
  children: ChildSeen[],
): Promise<string[]> {
  const open = children.filter((c) => !ENDS.has(c.view.status)).slice(0, 3);
  return Promise.all(open.map((c) => describeFlow(stack, client, ctx, c.view.id)));
}
