import { jobKind, type FlowState } from "../../shared/flow/index.js";
import type { PurgeOutcome, Store } from "../../shared/store/index.js";
import type { Env } from "../core/env.js";
import { unwrap } from "../core/problem.js";
import { scopeFor, type FlowScope } from "../core/scopes.js";
import { coordinatorStub } from "../core/stubs.js";
import { childKey } from "./children.js";
import { over } from "./purge-records.js";

/*
 * A child's retention follows its parent's (docs/flows.md, "Child flows"): removing a flow
 * removes its children first (each its own, recursively), and retention leaves a child alone
 * while its parent is kept. Done before the flow's own removal (purge.ts), outside
 * blockConcurrencyWhile: a tree of children may take longer than that allows, and the flow
 * ended, so nothing it does meanwhile makes a child.
 */

/** How a flow is being removed. */
export interface PurgeOptions {
  /** Its context is being deleted: whatever it is doing, and not its children (the context's deletion takes them). */
  force?: boolean;
  /** Retention's sweep removes it: a child whose parent is still there is kept. */
  expiring?: boolean;
  /** Its parent's removal removes it: only a flow whose record names this parent goes. */
  parent?: number;
}

/** Children removed at once. */
const PARALLEL = 20;

/** What the step before a flow's removal needs of its object. */
export interface ChildPurging {
  load(): Promise<FlowState | null>;
  env: Env;
  scope: FlowScope;
  store: Store;
}

/**
 * The step before the flow's own removal: an answer when it stops there (not the parent's child:
 * `gone`; a child kept while its parent is: `kept`; a child of it still running: `running`, naming
 * it), else undefined once its children are removed (or there were none). A child already gone is
 * fine. Cost: one EXISTS for a child retention looks at; for a flow that ended, one MGET of the
 * start keys of every attempt of its child-flow jobs (which find a child whose job ended before
 * it knew it, while the key lives, 24 h), one pipeline of EXISTS over the children it knows, and
 * one call per child still there: 2 storage calls and a call per child, so a removal cut short
 * (a request's limit on subrequests) and asked again goes on with the children left.
 */
export async function purgeChildren(p: ChildPurging, options: PurgeOptions): Promise<PurgeOutcome | undefined> {
  if (options.force || p.scope.job) return undefined;
  const state = await p.load();
  if (!state) return undefined; // purge.ts answers gone
  if (options.parent !== undefined && state.parent?.flow_id !== options.parent) return "gone";
  if (options.expiring && state.parent && (await p.store.retention.flowExists(state.contextId, state.parent.flow_id)))
    return { kept: state.parent.flow_id };
  if (!over(state)) return undefined; // purge.ts answers running
  const children = await childrenOf(p.store, state);
  for (let i = 0; i < children.length; i += PARALLEL) {
    const outcomes = await Promise.all(
      children.slice(i, i + PARALLEL).map(async (child) => {
        const scope = scopeFor({ prefix: p.scope.prefix, origin: p.scope.origin }, state.contextId, { flowId: child });
        return { child, outcome: unwrap(await coordinatorStub(p.env, scope).purge(scope, { parent: state.id })) };
      }),
    );
    const running = outcomes.find(({ outcome }) => typeof outcome === "object" && "running" in outcome);
    if (running) return { running: (running.outcome as { running: string }).running, child: running.child };
  }
  return undefined;
}

/**
 * The flow's children it knows: each child-flow job's current child, those of its runs before a
 * re-run (kept on its record, `past_children`), and those its attempts' start keys still find (a
 * child whose start was not yet told when its job ended: the key lives a day).
 */
async function childrenOf(store: Store, state: FlowState): Promise<number[]> {
  const children = new Set<number>();
  const startKeys: string[] = [];
  for (const id of state.order) {
    const job = state.jobs.job(id);
    if (jobKind(job.spec) !== "flow") continue;
    if (job.child !== undefined) children.add(job.child);
    for (const past of job.pastChildren ?? []) children.add(past);
    for (let attempt = 1; attempt <= job.attempt; attempt++) startKeys.push(childKey(state.id, id, attempt));
  }
  for (const child of await store.flows.reservedFlows(state.contextId, state.callerId, startKeys))
    if (child !== undefined) children.add(child);
  // Only those still there: a removal cut short and asked again calls no child removed before.
  return store.retention.flowsExisting(state.contextId, [...children]);
}
