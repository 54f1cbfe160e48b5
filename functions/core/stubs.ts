import type {
  ContextFeedRpc,
  DeliverAnswer,
  DeliveryTarget,
  DispatcherRpc,
  FlowCoordinatorRpc,
  SchedulerRpc,
  ScheduleScope,
  Wake,
} from "./contracts.js";
import type { Env } from "./env.js";
import { Problem, unwrap } from "./problem.js";
import {
  coordinatorName,
  dispatcherName,
  feedName,
  scopeFor,
  workItemOwner,
  type DispatchScope,
  type FlowScope,
} from "./scopes.js";

/** The stub of the FlowCoordinator that owns a scope. */
export function coordinatorStub(env: Env, scope: FlowScope): DurableObjectStub<FlowCoordinatorRpc> {
  return env.FLOW_COORDINATOR.get(env.FLOW_COORDINATOR.idFromName(coordinatorName(scope)));
}

/** The stub of a context's Dispatcher. */
export function dispatcherStub(env: Env, scope: DispatchScope): DurableObjectStub<DispatcherRpc> {
  return env.DISPATCHER.get(env.DISPATCHER.idFromName(dispatcherName(scope)));
}

/** The stub of a context's feed (its event stream). */
export function feedStub(env: Env, scope: DispatchScope): DurableObjectStub<ContextFeedRpc> {
  return env.CONTEXT_FEED.get(env.CONTEXT_FEED.idFromName(feedName(scope)));
}

/** The deterministic Durable Object name of a schedule's Scheduler: `<prefix><context>:schedule:<id>`. */
export function schedulerName(scope: Pick<ScheduleScope, "prefix" | "contextId" | "scheduleId">): string {
  return `${scope.prefix}${scope.contextId}:schedule:${scope.scheduleId}`;
}

/** The stub of a schedule's Scheduler. */
export function schedulerStub(env: Env, scope: ScheduleScope): DurableObjectStub<SchedulerRpc> {
  return env.SCHEDULER.get(env.SCHEDULER.idFromName(schedulerName(scope)));
}

/**
 * Wakes a context's dispatcher. Resolves once the wake is durable (the dispatcher set its alarm),
 * so a caller that must not lose it (a commit that queued work) can wait for that and no more:
 * the round itself runs after the answer.
 */
export async function wakeDispatcher(env: Env, scope: DispatchScope, wake: Wake): Promise<void> {
  await dispatcherStub(env, scope).wake(scope, wake);
}

/**
 * Asks the FlowCoordinator that owns a work item (a claimed attempt) to deliver it to `runner`.
 * An item that is no work item, or whose flow no longer exists, is `gone`: its slot can be freed.
 * Any other failure (the object unreachable) is thrown: the claim stays unsettled, and the
 * dispatcher's reaper asks again later.
 */
export async function askOwner(
  env: Env,
  base: DispatchScope,
  item: string,
  runner: DeliveryTarget,
): Promise<DeliverAnswer> {
  const target = workItemOwner(item);
  if (!target) return { outcome: "gone", reason: `not a work item: ${item}` };
  const owner = scopeFor(base, base.contextId, target);
  try {
    return unwrap(await coordinatorStub(env, owner).deliver(owner, item, runner));
  } catch (error) {
    if (error instanceof Problem && error.status === 404) return { outcome: "gone", reason: error.message };
    throw error;
  }
}
