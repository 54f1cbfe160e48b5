import { resolveDag, messagesNeeded, type FlowSubmission } from "../../shared/flow/index.js";
import {
  identityOf,
  progressCount,
  type Context,
  type Flow,
  type FlowOrigin,
  type FlowParent,
  type FlowView,
} from "../../shared/model/index.js";
import type { FlowListQuery, Page, PushRunnerName, Reservation, ReservedIds } from "../../shared/store/index.js";
import type { FlowCoordinatorRpc } from "../core/contracts.js";
import { Problem, unwrap, type RpcResult } from "../core/problem.js";
import { nonceReplayed, type SignatureNonce } from "../core/principal.js";
import type { FlowScope } from "../core/scopes.js";
import { coordinatorStub } from "../core/stubs.js";
import { contextFor, requireActor } from "./access.js";
import { callScope, type FlowCall } from "./call.js";
import { checkChildTemplates, checkPinnedRunners, createInObject, dagProblem, requestDigest } from "./submission.js";

/**
 * Submits a flow (admins): checks the DAG (cycles named, unknown dependencies, duplicates,
 * limits, pinned runners), reserves its ids (its jobs' compensations are jobs too), and has its
 * Durable Object store it all or nothing.
 *
 * A repeated `Idempotency-Key` finishes what the first submission started, with the ids it
 * reserved: storage may have run the reservation, or the creation, and only the answer got lost
 * (the caller saw a 503). So a retry creates the flow if it is missing, starts it if `start` was
 * asked, and answers with it. The same key with another request is refused (422).
 *
 * A signed request's `nonce` is spent by the reservation (the same script), not before: a
 * submission costs one storage command less, and a replay still creates nothing.
 *
 * A flow started from a template (`origin`, templates.ts) goes the same way; its Idempotency-Key's
 * digest covers the start as asked (name, version, inputs), and its record keeps the version. A
 * schedule's fire names the schedule (`scheduleId`), which the flow's record keeps with its name
 * and labels.
 */
export async function submitFlow(
  call: FlowCall,
  contextId: number,
  submission: FlowSubmission,
  idempotencyKey: string | undefined,
  nonce?: SignatureNonce,
  origin?: TemplateOrigin,
  scheduleId?: number,
): Promise<{ view: FlowView; created: boolean }> {
  const callerId = requireActor(call);
  const context = await contextFor(call, contextId, "admin");
  const check = resolveDag(submission.jobs);
  if ("issues" in check) throw dagProblem(check.issues);
  await checkPinnedRunners(call, contextId, submission.jobs);
  await checkChildTemplates(call, contextId, submission.jobs);
  // A start is taken from the throttle before anything is reserved, so a refused submission
  // leaves nothing behind; a retry under an Idempotency-Key that got as far as a reservation
  // was counted when it first came.
  const throttled = submission.start && context.flow_starts_per_minute !== undefined;
  if (throttled && nonce) {
    // A replayed request must not take a start: its nonce is spent first (a command more, only
    // in contexts that throttle starts), and the reservation is then made without it.
    if (!(await call.store.nonces.claim(nonce.keyid, nonce.value, contextId, Math.ceil(nonce.ttlMs / 1000))))
      throw nonceReplayed();
    nonce = undefined;
  }
  if (throttled && !(idempotencyKey && (await call.store.flows.reserved(contextId, callerId, idempotencyKey))))
    await takeFlowStart(call, context);

  const chosen = submission.jobs.flatMap((job, i) => (job.id !== undefined ? [i] : []));
  // Every job's compensation is a job of its own, with an allocated id (resolveDag).
  const compensations = check.jobs.length - submission.jobs.length;
  const digest = idempotencyKey ? await requestDigest(origin?.request ?? submission) : undefined;
  const reservation = await call.store.flows.reserve({
    contextId,
    callerId,
    ...(submission.id !== undefined ? { flowId: submission.id } : {}),
    jobsToAllocate: submission.jobs.length - chosen.length + compensations,
    highestChosenJobId: Math.max(0, ...submission.jobs.map((j) => j.id ?? 0)),
    messages: messagesNeeded(check.jobs),
    ...(idempotencyKey && digest ? { idempotencyKey, digest } : {}),
    ...(nonce ? { nonce } : {}),
    // Its first commit may claim work for them (never a flow with max_parallel's, see OwnClaims).
    pushRunners: submission.start && submission.max_parallel === undefined,
  });
  if ("replayed" in reservation) throw nonceReplayed();
  const { ids, pushRunners, created } = reserved(reservation, digest, idempotencyKey);
  let next = ids.firstJobId;
  const resolved = resolveDag(submission.jobs, () => next++);
  if ("issues" in resolved) throw dagProblem(resolved.issues);
  const view = await createInObject(call, callScope(call, contextId, { flowId: ids.flowId }), {
    callerId,
    jobs: resolved.jobs,
    envVars: submission.env_vars,
    timeouts: submission.timeouts,
    priority: submission.priority,
    maxParallel: submission.max_parallel,
    messageBase: ids.firstMessageId,
    chosen,
    start: submission.start,
    pushRunners,
    template: origin?.ref,
    parent: origin?.parent,
    identity: identityOf({ name: submission.name, labels: submission.labels, schedule_id: scheduleId }),
  });
  // A template's start chooses no ids, so a flow under its reserved id is its own, made by the
  // first try (from the version that was the latest then, which may have fewer jobs than now's).
  if (view.caller_id !== callerId || (!origin && view.jobs.length !== resolved.jobs.length)) {
    throw new Problem("conflict", `flow id ${ids.flowId} is taken by another flow`);
  }
  return { view, created };
}

/** A flow started from a template: the version it is made of, and the start as asked. */
export interface TemplateOrigin {
  ref: FlowOrigin;
  /** What the start's Idempotency-Key digest covers. */
  request: unknown;
  /** The job that starts it, for a child flow. */
  parent?: FlowParent | undefined;
}

/**
 * The ids a reservation holds: fresh ones, or the ones an Idempotency-Key reserved before for
 * the same request (`created: false`); the key with another request is refused, 422.
 */
function reserved(
  reservation: Exclude<Reservation, { replayed: true }>,
  digest: string | undefined,
  idempotencyKey: string | undefined,
): { ids: ReservedIds; pushRunners?: PushRunnerName[] | undefined; created: boolean } {
  if (!("existing" in reservation)) return { ids: reservation, pushRunners: reservation.pushRunners, created: true };
  const existing = reservation.existing;
  if (existing.digest !== digest) {
    throw new Problem(
      "idempotency-key-reused",
      `Idempotency-Key ${idempotencyKey} was used for another request (flow ${existing.flowId}); use a new key for a new request`,
      { field: "header.idempotency-key" },
    );
  }
  return { ids: existing, created: false };
}

/** Loads a flow with every job's live status (readers). */
export async function loadFlow(call: FlowCall, contextId: number, flowId: number): Promise<FlowView> {
  await contextFor(call, contextId, "read");
  const scope = callScope(call, contextId, { flowId });
  const view = unwrap(await coordinatorStub(call.env, scope).view(scope, { explain: true }));
  if (!view) throw new Problem("not-found", `flow ${flowId} does not exist in context ${contextId}`);
  return view;
}

/**
 * Runs an admin's command on a flow's Durable Object (start, cancel, re-run): checks that the
 * caller is an admin of the context, then runs `command` and unwraps its answer. The object
 * itself answers 404 for a flow that does not exist.
 */
export async function flowCommand<T>(
  call: FlowCall,
  contextId: number,
  flowId: number,
  command: (stub: DurableObjectStub<FlowCoordinatorRpc>, scope: FlowScope) => Promise<RpcResult<T>>,
): Promise<T> {
  await contextFor(call, contextId, "admin");
  const scope = callScope(call, contextId, { flowId });
  return unwrap(await command(coordinatorStub(call.env, scope), scope));
}

/**
 * The DAG of a flow: nodes with statuses, edges from dependency to dependent, and from a map to
 * each of its instances (readers). Jobs that joined the flow while it ran are in it.
 */
export async function flowDag(call: FlowCall, contextId: number, flowId: number) {
  const view = await loadFlow(call, contextId, flowId);
  return {
    flow_id: view.id,
    status: view.status,
    ...(view.error ? { error: view.error } : {}),
    nodes: view.jobs.map((j) => ({
      id: j.id,
      key: j.key,
      ...(j.name ? { name: j.name } : {}),
      kind: j.kind,
      ...(j.script_type !== undefined ? { script_type: j.script_type } : {}),
      status: j.status,
      ...(j.waiting ? { waiting: j.waiting } : {}),
      attempt: j.attempt,
      ...(j.runner_id !== undefined ? { runner_id: j.runner_id } : {}),
      ...(j.status === "error" && j.error !== undefined ? { error: j.error } : {}),
      ...(j.skip_reason !== undefined ? { skip_reason: j.skip_reason } : {}),
      ...(j.compensates !== undefined ? { compensates: j.compensates } : {}),
      ...(j.child_flow_id !== undefined ? { child_flow_id: j.child_flow_id } : {}),
      ...(j.map_of !== undefined ? { map_of: j.map_of } : {}),
      ...(j.item_index !== undefined ? { item_index: j.item_index } : {}),
      ...(j.added_by !== undefined ? { added_by: j.added_by } : {}),
    })),
    edges: view.jobs.flatMap((j) => [
      ...j.depends.map((from) => ({ from, to: j.id })),
      ...(j.map_of !== undefined ? [{ from: j.map_of, to: j.id }] : []),
    ]),
  };
}

/**
 * Starts a flow (admins); starting it again changes nothing. In a context that limits flow starts
 * per minute, a start of a flow not yet started takes one (429 when none is left).
 */
export async function startFlow(call: FlowCall, contextId: number, flowId: number): Promise<FlowView> {
  const context = await contextFor(call, contextId, "admin");
  const scope = callScope(call, contextId, { flowId });
  const stub = coordinatorStub(call.env, scope);
  if (context.flow_starts_per_minute !== undefined) {
    const view = unwrap(await stub.view(scope));
    if (!view) throw new Problem("not-found", `flow ${flowId} does not exist in context ${contextId}`);
    if (view.status === "dispatched") await takeFlowStart(call, context);
  }
  return unwrap(await stub.start(scope));
}

/**
 * Takes one of the context's flow starts when it limits them per minute; when none is left,
 * answers 429 `flow-starts-throttled` with `Retry-After`.
 */
async function takeFlowStart(call: FlowCall, context: Context): Promise<void> {
  const perMinute = context.flow_starts_per_minute;
  if (perMinute === undefined) return;
  const waitMs = await call.store.throttles.takeFlowStart(context.id, perMinute);
  if (waitMs <= 0) return;
  throw new Problem(
    "flow-starts-throttled",
    `context ${context.id} allows ${perMinute} flow starts a minute; the next one in ${Math.ceil(waitMs / 1000)} s`,
    { limit: perMinute, retry_after_ms: waitMs },
    { "retry-after": String(Math.ceil(waitMs / 1000)) },
  );
}

/**
 * Lists a context's flows (readers): by id, all or those of one status, narrowed by name and
 * labels (a filtered page looks through at most FILTER_WINDOW flows: shared/store/flow-list.ts).
 * Each item has its `progress`: an ended flow's from its record, a created one's from its jobs,
 * a running one's asked of its object (one call each, side by side; one out of reach is listed
 * without it).
 */
export async function listFlows(call: FlowCall, contextId: number, query: FlowListQuery): Promise<Page<Flow>> {
  await contextFor(call, contextId, "read");
  const page = await call.store.flows.list(contextId, query);
  const items = await Promise.all(page.items.map((flow) => withProgress(call, contextId, flow)));
  return { ...page, items };
}

/** A listed flow with its progress (see listFlows). */
async function withProgress(call: FlowCall, contextId: number, flow: Flow): Promise<Flow> {
  if (flow.status === "dispatched") {
    // Not started: every job is as it was made (FlowState's new jobs), nothing to ask.
    const progress = progressCount(flow.jobs.map(() => "dispatched" as const));
    return { ...flow, progress };
  }
  if (flow.status !== "started" && flow.status !== "compensating") return flow;
  const scope = callScope(call, contextId, { flowId: flow.id });
  try {
    const progress = unwrap(await coordinatorStub(call.env, scope).progress(scope));
    return progress ? { ...flow, progress } : flow;
  } catch (error) {
    console.warn(`flow ${flow.id}: listed without its progress: ${(error as Error).message}`);
    const { progress: _stale, ...rest } = flow;
    return rest;
  }
}
