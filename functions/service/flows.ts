import {
  messagesNeeded,
  resolveDag,
  MESSAGE_TIMEOUTS,
  type DagIssue,
  type FlowSubmission,
} from "../../shared/flow/index.js";
import type { Flow, FlowStatus } from "../../shared/model/index.js";
import type { Page } from "../../shared/store/index.js";
import { Problem, unwrap } from "../api/problem.js";
import type { Env } from "../env.js";
import type { FlowCoordinator } from "../flow/coordinator.js";
import { coordinatorName, type FlowScope } from "../flow/scope.js";
import type { FlowView } from "../flow/view.js";
import { contextFor, requireActor } from "./access.js";
import type { ServiceCall } from "./call.js";

/** A service call that can reach the flows' Durable Objects. */
export interface FlowCall extends ServiceCall {
  env: Env;
  /** The coordinator's public origin, for runner callbacks. */
  origin: string;
  /** Keeps work going after the answer is sent (the request's waitUntil). */
  later(work: Promise<unknown>): void;
}

/** The Durable Object stub of a scope. */
export function coordinator(call: FlowCall, scope: FlowScope): DurableObjectStub<FlowCoordinator> {
  return call.env.FLOW_COORDINATOR.get(call.env.FLOW_COORDINATOR.idFromName(coordinatorName(scope)));
}

export function flowScope(call: FlowCall, contextId: number, flowId: number): FlowScope {
  return { prefix: call.store.keys.prefix, contextId, flowId, origin: call.origin };
}

/** A 400 naming every DAG issue (the first as `field`). */
export function dagProblem(issues: DagIssue[]): Problem {
  const errors = issues.map((i) => ({ field: `body.${i.field}`, message: i.message }));
  const first = errors[0] as { field: string; message: string };
  return new Problem(400, "invalid-input", "Invalid input", `${first.field}: ${first.message}`, { field: first.field, errors });
}

/** 400 when a job pins a runner that is not registered in the context. */
async function checkPinnedRunners(call: FlowCall, contextId: number, jobs: { runner_id?: number | undefined }[]): Promise<void> {
  const pinned = jobs.flatMap((job, i) => (job.runner_id !== undefined ? [{ i, id: job.runner_id }] : []));
  if (pinned.length === 0) return;
  const runners = new Set((await call.store.runners.list({ context_id: contextId }, 0, 1000)).items.map((r) => r.id));
  const missing = pinned.filter((p) => !runners.has(p.id));
  if (missing.length > 0) {
    throw dagProblem(missing.map((m) => ({ field: `jobs.${m.i}.runner_id`, message: `runner ${m.id} is not registered in context ${contextId}` })));
  }
}

/** The retry backoff of a submission: its own, or the deployment's (RETRY_BASE_MS, RETRY_CAP_MS). */
export function retryPolicy(call: FlowCall, asked: { retry_base_ms?: number | undefined; retry_cap_ms?: number | undefined }) {
  return {
    retry_base_ms: asked.retry_base_ms ?? call.config.retryBaseMs,
    retry_cap_ms: asked.retry_cap_ms ?? call.config.retryCapMs,
  };
}

/** A fresh W3C trace id, or the one of the request's `traceparent`. */
export function traceId(request: Request): string {
  const parent = request.headers.get("traceparent");
  const match = parent ? /^[0-9a-f]{2}-([0-9a-f]{32})-[0-9a-f]{16}-[0-9a-f]{2}$/.exec(parent) : null;
  if (match?.[1] && !/^0+$/.test(match[1])) return match[1];
  return [...crypto.getRandomValues(new Uint8Array(16))].map((b) => b.toString(16).padStart(2, "0")).join("");
}

/**
 * Submits a flow (admins): checks the DAG (cycles named, unknown dependencies, duplicates,
 * limits, pinned runners), reserves its ids, and has its Durable Object store it all or nothing.
 * A repeated `Idempotency-Key` answers with the flow the first submission created.
 */
export async function submitFlow(
  call: FlowCall,
  contextId: number,
  submission: FlowSubmission,
  idempotencyKey: string | undefined,
): Promise<{ view: FlowView; created: boolean }> {
  const callerId = requireActor(call);
  await contextFor(call, contextId, "admin");
  const check = resolveDag(submission.jobs, () => 1);
  if ("issues" in check) throw dagProblem(check.issues);
  await checkPinnedRunners(call, contextId, submission.jobs);

  const chosen = submission.jobs.flatMap((job, i) => (job.id !== undefined ? [i] : []));
  const reservation = await call.store.flowStore.reserve({
    contextId,
    callerId,
    ...(submission.id !== undefined ? { flowId: submission.id } : {}),
    jobsToAllocate: submission.jobs.length - chosen.length,
    highestChosenJobId: Math.max(0, ...submission.jobs.map((j) => j.id ?? 0)),
    messages: messagesNeeded(submission.jobs),
    ...(idempotencyKey ? { idempotencyKey } : {}),
  });
  if ("existing" in reservation) {
    const existing = flowScope(call, contextId, reservation.existing);
    const view = unwrap(await coordinator(call, existing).view(existing));
    if (!view) throw new Problem(409, "conflict", "Conflict", `Idempotency-Key ${idempotencyKey} names flow ${reservation.existing}, which no longer exists`);
    return { view, created: false };
  }
  let next = reservation.firstJobId;
  const resolved = resolveDag(submission.jobs, () => next++);
  if ("issues" in resolved) throw dagProblem(resolved.issues);
  const scope = flowScope(call, contextId, reservation.flowId);
  const view = unwrap(await coordinator(call, scope).create(scope, {
    callerId,
    jobs: resolved.jobs,
    envVars: submission.env_vars,
    timeouts: {
      timeout: submission.timeouts.timeout ?? MESSAGE_TIMEOUTS.timeout,
      timeout_ack: submission.timeouts.timeout_ack ?? MESSAGE_TIMEOUTS.timeout_ack,
      ...(submission.timeouts.timeout_result !== undefined ? { timeout_result: submission.timeouts.timeout_result } : {}),
      ...retryPolicy(call, submission.timeouts),
    },
    traceId: traceId(call.request),
    messageBase: reservation.firstMessageId,
    chosen,
    start: submission.start,
  }));
  if (view.caller_id !== callerId || view.jobs.length !== resolved.jobs.length) {
    throw new Problem(409, "conflict", "Conflict", `flow id ${reservation.flowId} is taken by another flow`);
  }
  return { view, created: true };
}

/** Loads a flow with every job's live status (readers). */
export async function loadFlow(call: FlowCall, contextId: number, flowId: number): Promise<FlowView> {
  await contextFor(call, contextId, "read");
  const scope = flowScope(call, contextId, flowId);
  const view = unwrap(await coordinator(call, scope).view(scope));
  if (!view) throw new Problem(404, "not-found", "Not found", `flow ${flowId} does not exist in context ${contextId}`);
  return view;
}

/** The DAG of a flow: nodes with statuses, edges from dependency to dependent (readers). */
export async function flowDag(call: FlowCall, contextId: number, flowId: number) {
  const view = await loadFlow(call, contextId, flowId);
  return {
    flow_id: view.id,
    status: view.status,
    nodes: view.jobs.map((j) => ({ id: j.id, key: j.key, ...(j.name ? { name: j.name } : {}), script_type: j.script_type, status: j.status, attempt: j.attempt, ...(j.runner_id !== undefined ? { runner_id: j.runner_id } : {}) })),
    edges: view.jobs.flatMap((j) => j.dependends.map((from) => ({ from, to: j.id }))),
  };
}

/** Starts a flow (admins); starting it again changes nothing. */
export async function startFlow(call: FlowCall, contextId: number, flowId: number): Promise<FlowView> {
  await contextFor(call, contextId, "admin");
  const scope = flowScope(call, contextId, flowId);
  const stub = coordinator(call, scope);
  if (!unwrap(await stub.view(scope))) throw new Problem(404, "not-found", "Not found", `flow ${flowId} does not exist in context ${contextId}`);
  return unwrap(await stub.start(scope));
}

/** Lists a context's flows, optionally in one status (readers). */
export async function listFlows(call: FlowCall, contextId: number, status: FlowStatus | undefined, offset: number, limit: number): Promise<Page<Flow>> {
  await contextFor(call, contextId, "read");
  return call.store.flowStore.list(contextId, status, offset, limit);
}
