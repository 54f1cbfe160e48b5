import { z } from "zod";
import { reportedEnd, type FlowEvent } from "../../shared/flow/index.js";
import { DeliveryReport, Log, SIZE_LIMITS, type DeliveryPayload } from "../../shared/model/index.js";
import type { WorkSettlement } from "../../shared/store/index.js";
import type { EventAnswer, ReportedEvent } from "../core/contracts.js";
import { Problem, unwrap } from "../core/problem.js";
import type { FlowScope, RunnerEventName } from "../core/scopes.js";
import { askOwners, coordinatorStub, dispatcherStub } from "../core/stubs.js";
import { callScope, scopeBase, type FlowCall } from "./call.js";
import { wakeContext } from "./wake.js";

/** Where a runner webhook points: the job's context, its flow or (outside flows) its caller, and its id. */
export type WebhookPath = { contextId: number; jobId: number } & ({ flowId: number } | { callerId: number });

/** The scope of the FlowCoordinator a webhook path reaches. */
export function webhookScope(call: FlowCall, path: WebhookPath): FlowScope {
  return callScope(
    call,
    path.contextId,
    "callerId" in path ? { callerId: path.callerId, jobId: path.jobId } : { flowId: path.flowId },
  );
}

const Attempt = z.int().min(1).max(1000);

/** Bodies of the runner webhooks. */
export const RunnerEventBodies = {
  ack: z.object({ attempt: Attempt }).strict(),
  started: z.object({ attempt: Attempt }).strict(),
  heartbeat: z.object({ attempt: Attempt }).strict(),
  result: z.object({ attempt: Attempt, ...DeliveryReport.shape }).strict(),
  logs: z.object({ attempt: Attempt, logs: z.array(Log).min(1).max(SIZE_LIMITS.logLinesPerReport) }).strict(),
} as const;

export type RunnerEventBody = z.output<(typeof RunnerEventBodies)[RunnerEventName]>;

/** A signature's nonce, checked by the job's Durable Object in its own storage. */
export type ReportNonce = { keyid: string; value: string; ttlMs: number };

/** The runner calling, which must belong to the context of the path. */
function runnerOf(call: FlowCall, contextId: number): number {
  const p = call.principal;
  if (p.kind !== "runner" || p.contextId !== contextId) {
    throw new Problem("forbidden", `only a runner of context ${contextId} reports on its jobs`, { needed: ["runner"] });
  }
  return p.id;
}

function toEvent(name: RunnerEventName, body: RunnerEventBody, job: number, runner: number): FlowEvent {
  const base = { job, attempt: body.attempt, runner, at: Date.now() };
  switch (name) {
    case "ack":
      return { type: "acknowledged", ...base };
    case "started":
      return { type: "started", ...base };
    case "heartbeat":
      return { type: "heartbeat", ...base };
    case "logs":
      return { type: "logs", ...base };
    case "result":
      return reportedEnd(base, body as z.output<typeof RunnerEventBodies.result>);
  }
}

/**
 * Routes a runner's report to the job's Durable Object. Only the runner the attempt was given
 * to may report; a replayed report (same outcome again) is answered as accepted so a runner that
 * lost the answer can stop retrying; a report on an old attempt is a 409. The job's Durable
 * Object refuses a `nonce` it has seen; a batch passes none for reports that are idempotent by
 * themselves (see reportRunnerEvents).
 */
export async function reportRunnerEvent(
  call: FlowCall,
  path: WebhookPath,
  name: RunnerEventName,
  body: RunnerEventBody,
  nonce: ReportNonce | undefined,
): Promise<EventAnswer> {
  const { scope, reported } = reportedEvent(call, path, name, body, nonce);
  return reportAnswer(unwrap(await coordinatorStub(call.env, scope).handle(scope, reported.event, reported.extras)));
}

/** A report as its job's Durable Object takes it: that object's scope, and the event with its extras. */
export function reportedEvent(
  call: FlowCall,
  path: WebhookPath,
  name: RunnerEventName,
  body: RunnerEventBody,
  nonce: ReportNonce | undefined,
): { scope: FlowScope; reported: ReportedEvent } {
  const runner = runnerOf(call, path.contextId);
  const logs = "logs" in body ? body.logs : undefined; // results and log reports carry lines
  return {
    scope: webhookScope(call, path),
    reported: {
      event: toEvent(name, body, path.jobId, runner),
      extras: { ...(nonce ? { nonce } : {}), ...(logs && logs.length > 0 ? { logs } : {}) },
    },
  };
}

/** The object's answer as the runner gets it: applied or duplicate, else the problem its webhook answers. */
export function reportAnswer(answer: EventAnswer): EventAnswer {
  switch (answer.outcome) {
    case "applied":
    case "duplicate":
      return answer;
    case "replayed":
      throw new Problem("nonce-replayed", answer.reason);
    case "wrong-runner":
      throw new Problem("not-your-job", answer.reason);
    case "stale":
      throw new Problem("stale-attempt", answer.reason);
    case "not-applicable":
      throw new Problem("not-found", answer.reason);
  }
}

/**
 * A pull runner takes up to `max` jobs of its script types (and those pinned to it), never more
 * than its concurrency leaves room for: the context's dispatcher claims them (work and slots in
 * one step, flows taking turns), as for push runners. Each attempt's FlowCoordinator records it as delivered (not yet acknowledged: the
 * runner acknowledges through `ack`) and hands out its delivery. A claim whose owner could not be
 * reached stays unsettled, and the context's dispatcher asks that owner again later.
 */
export async function leaseJobs(
  call: FlowCall,
  contextId: number,
  runnerId: number,
  max: number,
): Promise<DeliveryPayload[]> {
  const caller = runnerOf(call, contextId);
  if (caller !== runnerId) throw new Problem("forbidden", `runner ${caller} cannot lease for runner ${runnerId}`);
  const runner = await call.store.runners.load({ context_id: contextId, id: runnerId });
  if (!runner.local) throw new Problem("conflict", `runner ${runnerId} is not a pull (local) runner`);
  const { store } = call;
  const dispatch = { ...scopeBase(call), contextId };
  const claims = await dispatcherStub(call.env, dispatch).lease(dispatch, runnerId, max);
  const out: DeliveryPayload[] = [];
  const settlement: WorkSettlement = { delivered: [], gone: [], back: [] };
  const base = { ...scopeBase(call), contextId };
  let unasked = 0;
  const answers = await askOwners(
    call.env,
    base,
    claims.map((c) => c.item),
    { id: runnerId, address: "", perPost: 1, pubkey: runner.pubkey },
  );
  claims.forEach((claim, i) => {
    const answer = answers[i] ?? new Error("no answer");
    if (answer instanceof Error) {
      console.warn(`lease: the owner of ${claim.item} could not be asked: ${answer.message}`);
      unasked++;
    } else if (answer.outcome === "delivered") {
      // Without a payload it was handed out before: that lease's answer was lost.
      if (answer.payload) out.push(answer.payload);
      settlement.delivered.push(claim);
    } else {
      settlement.gone.push(claim);
    }
  });
  await store.dispatch.settle(contextId, settlement);
  // Claims left unsettled: the dispatcher looks at them, and comes back when it may reap them.
  if (unasked > 0) await wakeContext(call, contextId, { reap: true });
  return out;
}
