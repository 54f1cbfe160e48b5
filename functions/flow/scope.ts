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

/** The deterministic Durable Object name of a scope. */
export function coordinatorName(scope: Pick<FlowScope, "prefix" | "contextId" | "flowId" | "job">): string {
  return scope.job
    ? `${scope.prefix}${scope.contextId}:job:${scope.job.callerId}:${scope.job.id}`
    : `${scope.prefix}${scope.contextId}:flow:${scope.flowId}`;
}

/** The path under which a job's runner webhooks live. */
export function jobPath(scope: Pick<FlowScope, "contextId" | "flowId" | "job">, jobId: number): string {
  return scope.job
    ? `/v1/contexts/${scope.contextId}/jobs/${scope.job.callerId}/${scope.job.id}`
    : `/v1/contexts/${scope.contextId}/flows/${scope.flowId}/jobs/${jobId}`;
}
