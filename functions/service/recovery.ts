import type { DeadLetter } from "../../shared/model/index.js";
import type { Page } from "../../shared/store/index.js";
import { Problem, unwrap } from "../api/problem.js";
import type { FlowScope } from "../flow/scope.js";
import type { FlowView } from "../flow/view.js";
import { contextFor } from "./access.js";
import { coordinator, flowScope, type FlowCall } from "./flows.js";
import { relayLater } from "./relay-now.js";

/** Cancels a flow (admins): no new dispatch, runners of attempts in flight are told, flow marked. */
export async function cancelFlow(call: FlowCall, contextId: number, flowId: number, reason: string): Promise<FlowView> {
  await contextFor(call, contextId, "admin");
  const scope = flowScope(call, contextId, flowId);
  const stub = coordinator(call, scope);
  if (!unwrap(await stub.view(scope))) throw new Problem(404, "not-found", "Not found", `flow ${flowId} does not exist in context ${contextId}`);
  return unwrap(await stub.cancel(scope, reason));
}

/** Re-runs a failed flow from its failed jobs (admins); finished jobs are not run again. */
export async function rerunFlow(call: FlowCall, contextId: number, flowId: number): Promise<FlowView> {
  await contextFor(call, contextId, "admin");
  const scope = flowScope(call, contextId, flowId);
  const stub = coordinator(call, scope);
  if (!unwrap(await stub.view(scope))) throw new Problem(404, "not-found", "Not found", `flow ${flowId} does not exist in context ${contextId}`);
  return unwrap(await stub.rerun(scope));
}

/**
 * Pauses or resumes dispatch in a context (admins). While paused, nothing leaves msg_out for
 * runners and pull runners lease nothing; delivery deadlines wait. Resuming relays at once.
 */
export async function setDispatch(call: FlowCall, contextId: number, paused: boolean): Promise<{ context_id: number; paused: boolean }> {
  await contextFor(call, contextId, "admin");
  await call.store.contextAdmin.setPaused(contextId, paused);
  if (!paused) relayLater(call, contextId);
  return { context_id: contextId, paused };
}

/** Lists a context's dead letters, newest first (readers). */
export async function listDeadLetters(call: FlowCall, contextId: number, offset: number, limit: number): Promise<Page<DeadLetter>> {
  await contextFor(call, contextId, "read");
  return call.store.deadLetters.list(contextId, offset, limit);
}

/** One dead letter (readers). */
export async function loadDeadLetter(call: FlowCall, contextId: number, id: string): Promise<DeadLetter> {
  await contextFor(call, contextId, "read");
  return call.store.deadLetters.load(contextId, id);
}

/**
 * Keeps a runner's report that could not be read (a poison payload) as a dead letter: the job it
 * was about, why it was refused, and its first KiB. The report itself is answered 400.
 */
export async function recordPoisonPayload(call: FlowCall, scope: FlowScope, jobId: number, event: string, reason: string): Promise<void> {
  const runner = call.principal.kind === "runner" ? call.principal.id : 0;
  const text = new TextDecoder().decode(call.body.slice(0, 1024));
  await call.store.deadLetters.add({
    id: `payload:${scope.flowId}:${jobId}:${runner}:${Date.now()}`,
    kind: "payload",
    context_id: scope.contextId,
    flow_id: scope.flowId,
    job_id: jobId,
    ...(scope.job ? { caller_id: scope.job.callerId } : {}),
    attempts: 0,
    reason: `${event} report of runner ${runner}: ${reason}`,
    payload: text,
    at: call.store.now(),
  });
}
