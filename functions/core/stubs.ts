import type {
  ContextFeedRpc,
  DeliverAnswer,
  DeliveryTarget,
  DispatcherRpc,
  FlowCoordinatorRpc,
  OwnerAnswer,
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
 * Tells a context's dispatcher how deliveries of a flow's own claims went that `runner` did not
 * take (DispatcherRpc.settleOwn).
 */
export async function settleOwnClaims(
  env: Env,
  scope: DispatchScope,
  runner: Pick<DeliveryTarget, "id">,
  items: string[],
  answers: OwnerAnswer[],
): Promise<void> {
  await dispatcherStub(env, scope).settleOwn(scope, runner.id, items, answers);
}

/** Owners asked at once. */
const OWNER_CALLS = 64;

/**
 * Asks the FlowCoordinators that own work items (claimed attempts) to deliver them to `runner`:
 * one call per owner, however many of its items there are, up to OWNER_CALLS owners at once.
 * Answers in the items' order. An item that is no work item, or whose flow no longer exists, is
 * `gone`: its slot can be freed. Where the owner could not be asked (unreachable, or it could not
 * tell), the answer is the Error: the claim stays unsettled, and the dispatcher's reaper asks again
 * later.
 */
export async function askOwners(
  env: Env,
  base: DispatchScope,
  items: readonly string[],
  runner: DeliveryTarget,
): Promise<(DeliverAnswer | Error)[]> {
  const answers: (DeliverAnswer | Error)[] = [];
  const owners = new Map<string, { scope: FlowScope; at: number[] }>();
  items.forEach((item, i) => {
    const target = workItemOwner(item);
    if (!target) {
      answers[i] = { outcome: "gone", reason: `not a work item: ${item}` };
      return;
    }
    const scope = scopeFor(base, base.contextId, target);
    const name = coordinatorName(scope);
    const owner = owners.get(name) ?? { scope, at: [] };
    owner.at.push(i);
    owners.set(name, owner);
  });
  const queue = [...owners.values()];
  const ask = async () => {
    for (let next = queue.shift(); next; next = queue.shift()) {
      const { scope, at } = next;
      try {
        const got = unwrap(
          await coordinatorStub(env, scope).deliver(
            scope,
            at.map((i) => items[i] as string),
            runner,
          ),
        );
        at.forEach((i, k) => {
          const answer = got[k];
          answers[i] =
            answer === undefined || answer.outcome === "failed"
              ? new Error(answer?.reason ?? "the owner did not answer for it")
              : answer;
        });
      } catch (error) {
        const answer: DeliverAnswer | Error =
          error instanceof Problem && error.status === 404
            ? { outcome: "gone", reason: error.message }
            : (error as Error);
        for (const i of at) answers[i] = answer;
      }
    }
  };
  await Promise.all(Array.from({ length: Math.min(OWNER_CALLS, queue.length) }, ask));
  return answers;
}
