import type { Env } from "../env.js";
import type { FlowCoordinator } from "./coordinator.js";

/**
 * What a FlowCoordinator instance coordinates, passed with every call so an instance that lost
 * its memory knows where its state lives. One instance per flow, or per job that runs outside
 * any flow; the instance's name is derived from the scope, never chosen by a client.
 */
export interface FlowScope {
  /** The deployment's key prefix (KEY_PREFIX). */
  prefix: string;
  contextId: number;
  /** The flow's id; 0 for a job outside any flow. */
  flowId: number;
  /** For a job outside any flow: its caller and id. */
  job?: { callerId: number; id: number };
  /** The coordinator's public origin, for the callback URLs sent to runners. */
  origin: string;
}

/** What every scope of one deployment and request shares: the key prefix and the public origin. */
export type ScopeBase = Pick<FlowScope, "prefix" | "origin">;

/** What one FlowCoordinator runs: a flow by its id, or a job outside any flow by its caller and id. */
export type ScopeTarget = { flowId: number } | { callerId: number; jobId: number };

/** The scope of a flow, or of a job outside any flow, in a context. */
export function scopeFor(base: ScopeBase, contextId: number, target: ScopeTarget): FlowScope {
  return "flowId" in target
    ? { prefix: base.prefix, contextId, flowId: target.flowId, origin: base.origin }
    : { prefix: base.prefix, contextId, flowId: 0, job: { callerId: target.callerId, id: target.jobId }, origin: base.origin };
}

/** The deterministic Durable Object name of a scope. */
export function coordinatorName(scope: Pick<FlowScope, "prefix" | "contextId" | "flowId" | "job">): string {
  return scope.job
    ? `${scope.prefix}${scope.contextId}:job:${scope.job.callerId}:${scope.job.id}`
    : `${scope.prefix}${scope.contextId}:flow:${scope.flowId}`;
}

/** The stub of the FlowCoordinator that owns a scope. */
export function coordinatorStub(env: Env, scope: FlowScope): DurableObjectStub<FlowCoordinator> {
  return env.FLOW_COORDINATOR.get(env.FLOW_COORDINATOR.idFromName(coordinatorName(scope)));
}

/** The runner webhooks: what a runner reports about an attempt of a job delivered to it. */
export const RUNNER_EVENTS = ["ack", "started", "heartbeat", "result", "logs"] as const;

/** The path under which a job's runner webhooks live. */
function jobPath(scope: Pick<FlowScope, "contextId" | "flowId" | "job">, jobId: number): string {
  return scope.job
    ? `/v1/contexts/${scope.contextId}/jobs/${scope.job.callerId}/${scope.job.id}`
    : `/v1/contexts/${scope.contextId}/flows/${scope.flowId}/jobs/${jobId}`;
}

/** The absolute URL of a job's runner webhooks, at the origin its flow was created at. */
export function jobUrl(origin: string, scope: Pick<FlowScope, "contextId" | "flowId" | "job">, jobId: number): string {
  return `${origin}${jobPath(scope, jobId)}`;
}
