import { parseMessageKey, parseWorkItem, type DeadlineOwner } from "../../shared/keys.js";
import { Problem } from "./problem.js";

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

/** What a context's Dispatcher serves: the deployment's key prefix, the context, the public origin. */
export interface DispatchScope {
  prefix: string;
  contextId: number;
  /** The coordinator's public origin (for the scopes of the flows it reaches). */
  origin: string;
}

/** What every scope of one deployment and request shares: the key prefix and the public origin. */
export type ScopeBase = Pick<FlowScope, "prefix" | "origin">;

/**
 * What one FlowCoordinator runs: a flow by its id, or a job outside any flow by its caller and id
 * (what the context's deadline set names, too).
 */
export type ScopeTarget = DeadlineOwner;

/** The scope of a flow, or of a job outside any flow, in a context. */
export function scopeFor(base: ScopeBase, contextId: number, target: ScopeTarget): FlowScope {
  return "flowId" in target
    ? { prefix: base.prefix, contextId, flowId: target.flowId, origin: base.origin }
    : {
        prefix: base.prefix,
        contextId,
        flowId: 0,
        job: { callerId: target.callerId, id: target.jobId },
        origin: base.origin,
      };
}

/**
 * What owns a work item (a job's attempt as queued and held in runners' slots): its flow, or for
 * a job outside any flow (flow 0) its caller, read from the message key, and job. Null for
 * anything that is not a work item.
 */
export function workItemOwner(item: string): ScopeTarget | null {
  const work = parseWorkItem(item);
  const message = work ? parseMessageKey(work.messageKey) : null;
  if (!work || !message) return null;
  return work.flowId > 0 ? { flowId: work.flowId } : { callerId: message.callerId, jobId: work.jobId };
}

/** The scope of the dispatcher of the context a flow's scope names. */
export function dispatchScopeOf(scope: Pick<FlowScope, "prefix" | "contextId" | "origin">): DispatchScope {
  return { prefix: scope.prefix, contextId: scope.contextId, origin: scope.origin };
}

/** What a scope names, as problems say it: `flow <id>`, or `job <id> of actor <caller>`. */
export function scopeName(scope: Pick<FlowScope, "flowId" | "job">): string {
  return scope.job ? `job ${scope.job.id} of actor ${scope.job.callerId}` : `flow ${scope.flowId}`;
}

/**
 * A 409 naming the status that refused a command on a scope, as `flow 3 <detail>`, and in
 * `flow_status` (a job outside any flow: `job_status`; a problem's own `status` is its HTTP one).
 */
export function scopeConflict(
  scope: Pick<FlowScope, "flowId" | "job">,
  status: string,
  detail: string,
  extra: Record<string, unknown> = {},
): Problem {
  return new Problem("conflict", `${scopeName(scope)} ${detail}`, {
    [scope.job ? "job_status" : "flow_status"]: status,
    ...extra,
  });
}

/** The deterministic Durable Object name of a scope. */
export function coordinatorName(scope: Pick<FlowScope, "prefix" | "contextId" | "flowId" | "job">): string {
  return scope.job
    ? `${scope.prefix}${scope.contextId}:job:${scope.job.callerId}:${scope.job.id}`
    : `${scope.prefix}${scope.contextId}:flow:${scope.flowId}`;
}

/** The deterministic Durable Object name of a context's dispatcher. */
export function dispatcherName(scope: Pick<DispatchScope, "prefix" | "contextId">): string {
  return `${scope.prefix}${scope.contextId}:dispatch`;
}

/** The deterministic Durable Object name of a context's feed (its event stream). */
export function feedName(scope: Pick<DispatchScope, "prefix" | "contextId">): string {
  return `${scope.prefix}${scope.contextId}:feed`;
}

/** The runner webhooks: what a runner reports about an attempt of a job delivered to it. */
export const RUNNER_EVENTS = ["ack", "started", "heartbeat", "result", "logs"] as const;

/** The name of a runner webhook. */
export type RunnerEventName = (typeof RUNNER_EVENTS)[number];

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
