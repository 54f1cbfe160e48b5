import { randomHex } from "../../shared/auth/index.js";
import {
  messagesNeeded,
  resolveDag,
  MESSAGE_TIMEOUTS,
  type DagIssue,
  type FlowSubmission,
  type FlowTimeouts,
} from "../../shared/flow/index.js";
import type { Flow, FlowStatus } from "../../shared/model/index.js";
import type { Page, ReservedIds } from "../../shared/store/index.js";
import { fieldProblem } from "../api/errors.js";
import { Problem, unwrap, type Outcome } from "../api/problem.js";
import type { Env } from "../env.js";
import type { FlowCoordinator } from "../flow/coordinator.js";
import { coordinatorStub, scopeFor, type FlowScope, type ScopeBase, type ScopeTarget } from "../flow/scope.js";
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

/** What every scope of this call shares: the deployment's key prefix and the public origin. */
export function scopeBase(call: FlowCall): ScopeBase {
  return { prefix: call.store.keys.prefix, origin: call.origin };
}

/** The scope of a flow (or of a job outside any flow) in this call's deployment. */
export function callScope(call: FlowCall, contextId: number, target: ScopeTarget): FlowScope {
  return scopeFor(scopeBase(call), contextId, target);
}

/** A 400 naming every DAG issue (the first as `field`). */
export function dagProblem(issues: DagIssue[]): Problem {
  return fieldProblem(issues.map((i) => ({ field: `body.${i.field}`, message: i.message })));
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

/** The timeouts a submission (a flow, or a job outside any flow) may ask for. */
export interface AskedTimeouts {
  timeout?: number | undefined;
  timeout_ack?: number | undefined;
  timeout_result?: number | undefined;
  retry_base_ms?: number | undefined;
  retry_cap_ms?: number | undefined;
}

/**
 * The timeouts of a submission: its own, else the message defaults, and for the retry backoff
 * the deployment's (RETRY_BASE_MS, RETRY_CAP_MS). `timeout_result` stays unset unless asked for.
 */
export function flowTimeouts(call: FlowCall, asked: AskedTimeouts): FlowTimeouts {
  return {
    timeout: asked.timeout ?? MESSAGE_TIMEOUTS.timeout,
    timeout_ack: asked.timeout_ack ?? MESSAGE_TIMEOUTS.timeout_ack,
    ...(asked.timeout_result !== undefined ? { timeout_result: asked.timeout_result } : {}),
    retry_base_ms: asked.retry_base_ms ?? call.config.retryBaseMs,
    retry_cap_ms: asked.retry_cap_ms ?? call.config.retryCapMs,
  };
}

/** A fresh W3C trace id, or the one of the request's `traceparent`. */
export function traceId(request: Request): string {
  const parent = request.headers.get("traceparent");
  const match = parent ? /^[0-9a-f]{2}-([0-9a-f]{32})-[0-9a-f]{16}-[0-9a-f]{2}$/.exec(parent) : null;
  if (match?.[1] && !/^0+$/.test(match[1])) return match[1];
  return randomHex(16);
}

/** A digest of a submission as parsed, to tell a retry from another request under the same Idempotency-Key. */
async function submissionDigest(submission: FlowSubmission): Promise<string> {
  const bytes = new Uint8Array(await crypto.subtle.digest("SHA-256", new TextEncoder().encode(JSON.stringify(submission))));
  return [...bytes].map((b) => b.toString(16).padStart(2, "0")).join("");
}

/**
 * Submits a flow (admins): checks the DAG (cycles named, unknown dependencies, duplicates,
 * limits, pinned runners), reserves its ids, and has its Durable Object store it all or nothing.
 *
 * A repeated `Idempotency-Key` finishes what the first submission started, with the ids it
 * reserved: storage may have run the reservation, or the creation, and only the answer got lost
 * (the caller saw a 503). So a retry creates the flow if it is missing, starts it if `start` was
 * asked, and answers with it. The same key with another request is refused (422).
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
  const digest = idempotencyKey ? await submissionDigest(submission) : undefined;
  const reservation = await call.store.flowStore.reserve({
    contextId,
    callerId,
    ...(submission.id !== undefined ? { flowId: submission.id } : {}),
    jobsToAllocate: submission.jobs.length - chosen.length,
    highestChosenJobId: Math.max(0, ...submission.jobs.map((j) => j.id ?? 0)),
    messages: messagesNeeded(submission.jobs),
    ...(idempotencyKey && digest ? { idempotencyKey, digest } : {}),
  });
  let ids: ReservedIds;
  let created = true;
  if ("existing" in reservation) {
    const existing = reservation.existing;
    if (!("digest" in existing)) return { view: await existingFlow(call, contextId, existing.flowId, idempotencyKey), created: false };
    if (existing.digest !== digest) {
      throw new Problem(422, "idempotency-key-reused", "Idempotency-Key reused", `Idempotency-Key ${idempotencyKey} was used for another request (flow ${existing.flowId}); use a new key for a new request`, { field: "header.idempotency-key" });
    }
    ids = existing;
    created = false;
  } else {
    ids = reservation;
  }
  let next = ids.firstJobId;
  const resolved = resolveDag(submission.jobs, () => next++);
  if ("issues" in resolved) throw dagProblem(resolved.issues);
  const scope = callScope(call, contextId, { flowId: ids.flowId });
  const view = unwrap(await coordinatorStub(call.env, scope).create(scope, {
    callerId,
    jobs: resolved.jobs,
    envVars: submission.env_vars,
    timeouts: flowTimeouts(call, submission.timeouts),
    traceId: traceId(call.request),
    messageBase: ids.firstMessageId,
    chosen,
    start: submission.start,
  }));
  if (view.caller_id !== callerId || view.jobs.length !== resolved.jobs.length) {
    throw new Problem(409, "conflict", "Conflict", `flow id ${ids.flowId} is taken by another flow`);
  }
  return { view, created };
}

/** The flow an Idempotency-Key named when only its id was kept (keys written by older versions). */
async function existingFlow(call: FlowCall, contextId: number, flowId: number, idempotencyKey: string | undefined): Promise<FlowView> {
  const scope = callScope(call, contextId, { flowId });
  const view = unwrap(await coordinatorStub(call.env, scope).view(scope));
  if (!view) throw new Problem(409, "conflict", "Conflict", `Idempotency-Key ${idempotencyKey} names flow ${flowId}, which no longer exists`);
  return view;
}

/** Loads a flow with every job's live status (readers). */
export async function loadFlow(call: FlowCall, contextId: number, flowId: number): Promise<FlowView> {
  await contextFor(call, contextId, "read");
  const scope = callScope(call, contextId, { flowId });
  const view = unwrap(await coordinatorStub(call.env, scope).view(scope, { explain: true }));
  if (!view) throw noSuchFlow(contextId, flowId);
  return view;
}

function noSuchFlow(contextId: number, flowId: number): Problem {
  return new Problem(404, "not-found", "Not found", `flow ${flowId} does not exist in context ${contextId}`);
}

/**
 * Runs an admin's command on a flow's Durable Object (start, cancel, re-run): checks that the
 * caller is an admin of the context and answers 404 for a flow that does not exist (so a command
 * never brings an empty coordinator to life), then runs `command` and unwraps its answer.
 */
export async function flowCommand<T>(
  call: FlowCall,
  contextId: number,
  flowId: number,
  command: (stub: DurableObjectStub<FlowCoordinator>, scope: FlowScope) => Promise<Outcome<T>>,
): Promise<T> {
  await contextFor(call, contextId, "admin");
  const scope = callScope(call, contextId, { flowId });
  const stub = coordinatorStub(call.env, scope);
  if (!unwrap(await stub.view(scope))) throw noSuchFlow(contextId, flowId);
  return unwrap(await command(stub, scope));
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
export function startFlow(call: FlowCall, contextId: number, flowId: number): Promise<FlowView> {
  return flowCommand(call, contextId, flowId, (stub, scope) => stub.start(scope));
}

/** Lists a context's flows, optionally in one status (readers). */
export async function listFlows(call: FlowCall, contextId: number, status: FlowStatus | undefined, offset: number, limit: number): Promise<Page<Flow>> {
  await contextFor(call, contextId, "read");
  return call.store.flowStore.list(contextId, status, offset, limit);
}
