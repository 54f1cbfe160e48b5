import type { DispatcherRpc, FlowCoordinatorRpc, Wake } from "./contracts.js";
import type { Env } from "./env.js";
import { coordinatorName, dispatcherName, type DispatchScope, type FlowScope } from "./scopes.js";

/** The stub of the FlowCoordinator that owns a scope. */
export function coordinatorStub(env: Env, scope: FlowScope): DurableObjectStub<FlowCoordinatorRpc> {
  return env.FLOW_COORDINATOR.get(env.FLOW_COORDINATOR.idFromName(coordinatorName(scope)));
}

/** The stub of a context's Dispatcher. */
export function dispatcherStub(env: Env, scope: DispatchScope): DurableObjectStub<DispatcherRpc> {
  return env.DISPATCHER.get(env.DISPATCHER.idFromName(dispatcherName(scope)));
}

/**
 * Wakes a context's dispatcher. Resolves once the wake is durable (the dispatcher set its alarm),
 * so a caller that must not lose it (a commit that queued work) can wait for that and no more:
 * the round itself runs after the answer.
 */
export async function wakeDispatcher(env: Env, scope: DispatchScope, wake: Wake): Promise<void> {
  await dispatcherStub(env, scope).wake(scope, wake);
}
