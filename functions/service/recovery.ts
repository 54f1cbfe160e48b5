import type { RerunRequest } from "../../shared/flow/index.js";
import { deadLetterIds } from "../../shared/keys.js";
import type { DeadLetter, Flow, FlowView } from "../../shared/model/index.js";
import type { Page } from "../../shared/store/index.js";
import { unwrap } from "../core/problem.js";
import type { FlowScope } from "../core/scopes.js";
import { coordinatorStub } from "../core/stubs.js";
import { contextChanged, contextFor } from "./access.js";
import { callScope, type FlowCall } from "./call.js";
import { flowCommand } from "./flows.js";
import { wakeContext } from "./wake.js";
import { webhookScope, type WebhookPath } from "./runner-events.js";

/**
 * Cancels a flow (admins): no new dispatch, runners of attempts in flight are told, flow marked;
 * with `compensate`, a flow with compensations unwinds instead of ending in error.
 */
export function cancelFlow(
  call: FlowCall,
  contextId: number,
  flowId: number,
  reason: string,
  compensate = false,
): Promise<FlowView> {
  return flowCommand(call, contextId, flowId, (stub, scope) => stub.cancel(scope, reason, compensate));
}

/**
 * Re-runs a flow (admins): a failed one from its failed jobs, or one that ended from a job
 * (`from`, with the `run` it replaces), with env overrides (docs/flows.md, "Re-runs").
 */
export function rerunFlow(
  call: FlowCall,
  contextId: number,
  flowId: number,
  body: RerunRequest = {},
): Promise<FlowView> {
  const input = { from: body.from, env: body.env_vars, run: body.run };
  return flowCommand(call, contextId, flowId, (stub, scope) => stub.rerun(scope, input));
}

/**
 * Pauses or resumes dispatch in a context (admins). While paused, no runner is given work (push
 * or pull) and nothing leaves msg_out; delivery deadlines wait. Resuming wakes the dispatcher.
 */
export async function setDispatch(
  call: FlowCall,
  contextId: number,
  paused: boolean,
): Promise<{ context_id: number; paused: boolean }> {
  await contextFor(call, contextId, "admin");
  await call.store.contextAdmin.setPaused(contextId, paused);
  await contextChanged(call, contextId);
  if (!paused) await wakeContext(call, contextId, { work: true, mail: true });
  call.later(announceDispatch(call, contextId, paused));
  return { context_id: contextId, paused };
}

/**
 * Tells each running (or unwinding) flow's stream (and so the context's) that dispatch paused or
 * resumed: one call per such flow, after the answer. Best effort: the pause itself is already durable, and
 * what each flow's jobs wait for says "paused" in their view either way.
 */
async function announceDispatch(call: FlowCall, contextId: number, paused: boolean): Promise<void> {
  const type = paused ? "flow.paused" : "flow.resumed";
  const reason = paused ? "dispatch paused in the context" : "dispatch resumed in the context";
  try {
    for (const status of ["started", "compensating"] as const) await announceTo(call, contextId, status, type, reason);
  } catch (error) {
    console.warn(`context ${contextId}: telling flows' streams of the ${type}: ${(error as Error).message}`);
  }
}

/** Tells the streams of the context's flows in `status` (running, or unwinding) of a pause or resume. */
async function announceTo(
  call: FlowCall,
  contextId: number,
  status: "started" | "compensating",
  type: "flow.paused" | "flow.resumed",
  reason: string,
): Promise<void> {
  for (let offset: number | undefined = 0; offset !== undefined;) {
    const page: Page<Flow> = await call.store.flows.list(contextId, { status, offset, limit: 200 });
    // One flow out of reach does not keep the others from being told.
    const told = await Promise.allSettled(
      page.items.map(async (flow) => {
        const scope = callScope(call, contextId, { flowId: flow.id });
        unwrap(await coordinatorStub(call.env, scope).announce(scope, type, reason));
      }),
    );
    for (const [i, result] of told.entries()) {
      if (result.status === "rejected")
        console.warn(`flow ${page.items[i]?.id}: not told of the ${type}: ${(result.reason as Error).message}`);
    }
    offset = page.next;
  }
}

/** Lists a context's dead letters, newest first (readers). */
export async function listDeadLetters(
  call: FlowCall,
  contextId: number,
  offset: number,
  limit: number,
): Promise<Page<DeadLetter>> {
  await contextFor(call, contextId, "read");
  return call.store.deadLetters.list(contextId, offset, limit);
}

/** One dead letter (readers). */
export async function loadDeadLetter(call: FlowCall, contextId: number, id: string): Promise<DeadLetter> {
  await contextFor(call, contextId, "read");
  return call.store.deadLetters.load(contextId, id);
}

/**
 * Deletes a dead letter (admins), once whatever it was about has been dealt with. Idempotent, as
 * deleting a schedule is: a letter already gone (deleted before, dropped past the context's cap,
 * never there) answers the same, so a retried delete never fails.
 */
export async function deleteDeadLetter(call: FlowCall, contextId: number, id: string): Promise<void> {
  await contextFor(call, contextId, "admin");
  await call.store.deadLetters.remove(contextId, id);
}

/** A runner's report its route refused: which check failed, where it was sent, and why. */
export interface RefusedReport {
  /** The validation target that failed: `json` is the body, anything else the request around it. */
  target: string;
  /** The webhook's path, when it names a job; undefined when the path itself is bad. */
  path: WebhookPath | undefined;
  event: string;
  reason: string;
}

/**
 * Decides what becomes of a refused runner report besides its 400: a body that could not be
 * read (a poison payload) sent to a job's webhook is kept as a dead letter, after the answer is
 * sent and best effort; a bad path or header has no job to file it under and is only refused.
 */
export function keepRefusedReport(call: FlowCall, refused: RefusedReport): void {
  if (refused.target !== "json" || !refused.path) return;
  const { path } = refused;
  call.later(
    recordPoisonPayload(call, webhookScope(call, path), path.jobId, refused.event, refused.reason).catch(
      () => undefined,
    ),
  );
}

/**
 * Keeps a runner's report that could not be read (a poison payload) as a dead letter: the job it
 * was about, why it was refused, and its first KiB. The report itself is answered 400.
 */
async function recordPoisonPayload(
  call: FlowCall,
  scope: FlowScope,
  jobId: number,
  event: string,
  reason: string,
): Promise<void> {
  const runner = call.principal.kind === "runner" ? call.principal.id : 0;
  const text = new TextDecoder().decode(call.body.slice(0, 1024));
  await call.store.deadLetters.add({
    id: deadLetterIds.payload(scope.flowId, jobId, runner, Date.now()),
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
