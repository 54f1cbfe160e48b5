import { z } from "zod";
import type { FlowEvent } from "../../shared/flow/index.js";
import { Log, ResultMap, type Message } from "../../shared/model/index.js";
import { Problem, unwrap } from "../api/problem.js";
import type { EventAnswer } from "../flow/coordinator.js";
import { callbacks, type DeliveryPayload } from "../flow/delivery.js";
import { scopeOfMessage } from "../flow/owners.js";
import { jobPath, type FlowScope } from "../flow/scope.js";
import { coordinator, type FlowCall } from "./flows.js";

/** The runner webhooks: what a runner reports about an attempt of a job delivered to it. */
export const RUNNER_EVENTS = ["ack", "started", "heartbeat", "result", "logs"] as const;
export type RunnerEventName = (typeof RUNNER_EVENTS)[number];

const Attempt = z.int().min(1).max(1000);

/** Bodies of the runner webhooks. */
export const RunnerEventBodies = {
  ack: z.object({ attempt: Attempt }).strict(),
  started: z.object({ attempt: Attempt }).strict(),
  heartbeat: z.object({ attempt: Attempt }).strict(),
  result: z
    .object({
      attempt: Attempt,
      status: z.enum(["finished", "error"]),
      result: ResultMap.default({}),
      error: z.string().max(4096).optional(),
      logs: z.array(Log).max(1000).default([]),
    })
    .strict(),
  logs: z.object({ attempt: Attempt, logs: z.array(Log).min(1).max(1000) }).strict(),
} as const;

export type RunnerEventBody = z.output<(typeof RunnerEventBodies)[RunnerEventName]>;

/** The runner calling, which must belong to the context of the path. */
function runnerOf(call: FlowCall, contextId: number): number {
  const p = call.principal;
  if (p.kind !== "runner" || p.contextId !== contextId) {
    throw new Problem(403, "forbidden", "Forbidden", `only a runner of context ${contextId} reports on its jobs`, { needed: ["runner"] });
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
    case "result": {
      const r = body as z.output<typeof RunnerEventBodies.result>;
      return r.status === "finished"
        ? { type: "finished", ...base, result: r.result }
        : { type: "failed", ...base, error: r.error ?? "the runner reported an error" };
    }
  }
}

/**
 * Routes a runner's report to the job's Durable Object. Only the runner the attempt was given
 * to may report; a replayed report (same outcome again) is answered as accepted so a runner that
 * lost the answer can stop retrying; a report on an old attempt is a 409.
 */
export async function reportRunnerEvent(
  call: FlowCall,
  scope: FlowScope,
  jobId: number,
  name: RunnerEventName,
  body: RunnerEventBody,
  nonce: { keyid: string; value: string; ttlMs: number },
): Promise<EventAnswer> {
  const runner = runnerOf(call, scope.contextId);
  const logs = name === "logs" ? (body as { logs: Log[] }).logs : name === "result" ? (body as { logs: Log[] }).logs : undefined;
  const answer = unwrap(
    await coordinator(call, scope).handle(scope, toEvent(name, body, jobId, runner), { nonce, ...(logs && logs.length > 0 ? { logs } : {}) }),
  );
  switch (answer.outcome) {
    case "applied":
    case "duplicate":
      return answer;
    case "replayed":
      throw new Problem(401, "nonce-replayed", "Unauthorized", answer.reason);
    case "wrong-runner":
      throw new Problem(403, "not-your-job", "Forbidden", answer.reason);
    case "stale":
      throw new Problem(409, "stale-attempt", "Conflict", answer.reason);
    case "not-applicable":
      throw new Problem(404, "not-found", "Not found", answer.reason);
  }
}

/**
 * A pull runner takes up to `max` jobs of its script types from the context's queues. Each one
 * is recorded as delivered to it (not yet acknowledged: it acknowledges through `ack`).
 */
export async function leaseJobs(call: FlowCall, contextId: number, runnerId: number, max: number): Promise<DeliveryPayload[]> {
  const caller = runnerOf(call, contextId);
  if (caller !== runnerId) throw new Problem(403, "forbidden", "Forbidden", `runner ${caller} cannot lease for runner ${runnerId}`);
  const runner = await call.store.runners.load({ context_id: contextId, id: runnerId });
  if (!runner.local) throw new Problem(409, "conflict", "Conflict", `runner ${runnerId} is not a pull (local) runner`);
  const leased = await call.store.flowStore.lease(contextId, runner.script_types, max);
  const out: DeliveryPayload[] = [];
  for (const { message } of leased) {
    const taken = await claimFor(call, message, runnerId);
    if (taken) out.push(taken);
  }
  return out;
}

async function claimFor(call: FlowCall, message: Message, runnerId: number): Promise<DeliveryPayload | null> {
  const job = message.job[0];
  if (!job) return null;
  const scope = scopeOfMessage(message, { prefix: call.store.keys.prefix, origin: call.origin });
  const stub = coordinator(call, scope);
  const base = { job: job.id, attempt: message.attempt ?? 1, runner: runnerId };
  const assigned = unwrap(await stub.handle(scope, { type: "assigned", ...base, at: Date.now() }));
  if (assigned.outcome !== "applied") return null; // the job moved on: the leased message is void
  unwrap(await stub.handle(scope, { type: "delivered", ...base, acknowledged: false, at: Date.now() }));
  return {
    message,
    context_id: message.context_id,
    flow_id: job.flow_id,
    job_id: job.id,
    attempt: base.attempt,
    runner_id: runnerId,
    callbacks: callbacks(`${assigned.origin || call.origin}${jobPath(scope, job.id)}`),
  };
}
