import { FLOW_ENDED } from "../../shared/flow/index.js";
import type { Context, ContextDetails, FlowStatus, RetentionUpdate } from "../../shared/model/index.js";
import { deleteContextStep, DELETION_STEP_MS } from "../upkeep/context-deletion.js";
import { Problem, unwrap } from "../core/problem.js";
import { retentionInForce } from "../upkeep/retention.js";
import { coordinatorStub } from "../core/stubs.js";
import { contextChanged, contextFor } from "./access.js";
import { callScope, scopeBase, type FlowCall, type ServiceCall } from "./call.js";

/** A context with the retention in force and what it stores (anyone in one of its lists). */
export async function contextDetails(call: ServiceCall, id: number): Promise<ContextDetails> {
  const context = await contextFor(call, id, "read", true);
  return withDetails(call, context);
}

async function withDetails(call: ServiceCall, context: Context): Promise<ContextDetails> {
  return {
    ...context,
    retention_in_force: retentionInForce(call.config, context.retention),
    stored: await call.store.retention.stored(context.id),
  };
}

/**
 * Sets a context's own retention (admins): a number sets a part, null goes back to the
 * deployment's default, an absent part stays. The sweep reads it at its next look at the
 * context, so a shorter window removes what it makes due then; a longer one keeps what is left.
 */
export async function setRetention(call: FlowCall, id: number, update: RetentionUpdate): Promise<ContextDetails> {
  const context = await contextFor(call, id, "admin", true);
  const next = { ...context.retention };
  for (const [part, value] of Object.entries(update) as [keyof RetentionUpdate, number | null | undefined][]) {
    if (value === null) delete next[part];
    else if (value !== undefined) next[part] = value;
  }
  await call.store.contextAdmin.setRetention(id, Object.keys(next).length > 0 ? next : undefined);
  await contextChanged(call, id);
  // Due at once: the sweep looks again with the new windows.
  await call.store.sweep.dueBy(id, Date.now());
  return contextDetails(call, id);
}

/**
 * Deletes an ended flow now, with everything it owns (admins): its jobs, messages, logs, index
 * entries and its object's storage, and its child flows, each with its own children. A flow
 * still running is refused (409 naming its status: cancel it first), as is one whose child still
 * runs (409 naming the child: its cancel is under way); one that does not exist (or was deleted
 * before) is 404.
 */
export async function deleteFlow(call: FlowCall, contextId: number, flowId: number): Promise<void> {
  await contextFor(call, contextId, "admin");
  const scope = callScope(call, contextId, { flowId });
  const outcome = unwrap(await coordinatorStub(call.env, scope).purge(scope));
  if (outcome === "gone") throw new Problem("not-found", `flow ${flowId} does not exist in context ${contextId}`);
  if (typeof outcome !== "object" || "kept" in outcome) return; // kept: only retention asks for that
  if (outcome.child !== undefined)
    throw new Problem(
      "conflict",
      `flow ${flowId}'s child flow ${outcome.child} is ${outcome.running} and still runs: delete it again once it ended (its children were removed with it up to there)`,
      { flow_status: outcome.running, child_flow_id: outcome.child },
    );
  throw new Problem(
    "conflict",
    FLOW_ENDED.has(outcome.running as FlowStatus)
      ? `flow ${flowId} is ${outcome.running} but some of its jobs still run: cancel it first, then delete it`
      : `flow ${flowId} is ${outcome.running}: only a flow that ended (finished, error, compensated or compensation_failed) can be deleted; cancel it first`,
    { flow_status: outcome.running },
  );
}

/**
 * Deletes a context and everything in it (admins): marked first, so it is gone for every caller
 * at once, then removed in bounded steps (runners, schedules, flows with their objects' storage,
 * the dispatcher's and feed's storage, the rest of its keys). True when done within this request;
 * false when the sweep carries the rest on (a minute at a time). Asking again goes on with it.
 */
export async function deleteContext(call: FlowCall, id: number): Promise<boolean> {
  await contextFor(call, id, "admin", true, true);
  await call.store.contextAdmin.beginDeletion(id, Date.now());
  await contextChanged(call, id);
  return deleteContextStep(call.env, call.store, scopeBase(call), id, Date.now() + DELETION_STEP_MS);
}
