import type { Env } from "../env.js";
import type { Dispatcher } from "./dispatcher.js";

/** What a context's Dispatcher serves: the deployment's key prefix, the context, the public origin. */
export interface DispatchScope {
  prefix: string;
  contextId: number;
  /** The coordinator's public origin (for the scopes of the flows it reaches). */
  origin: string;
}

/**
 * Why a dispatcher is woken: attempts were queued (`work`), runners' slots were freed (`freed`:
 * which runners), messages for actors were posted (`mail`), the context's runners changed
 * (`runners`), or claims that may have been abandoned should be looked at (`reap`, by the
 * supervisor's sweep).
 */
export interface Wake {
  work?: boolean;
  freed?: number[];
  mail?: boolean;
  runners?: boolean;
  reap?: boolean;
}

/** One wake that says all two wakes said. */
export function mergeWakes(a: Wake | undefined, b: Wake | undefined): Wake {
  const freed = [...new Set([...(a?.freed ?? []), ...(b?.freed ?? [])])];
  const flag = (k: "work" | "mail" | "runners" | "reap") => (a?.[k] || b?.[k] ? { [k]: true } : {});
  return { ...flag("work"), ...flag("mail"), ...flag("runners"), ...flag("reap"), ...(freed.length > 0 ? { freed } : {}) };
}

/** The deterministic Durable Object name of a context's dispatcher. */
export function dispatcherName(scope: Pick<DispatchScope, "prefix" | "contextId">): string {
  return `${scope.prefix}${scope.contextId}:dispatch`;
}

/** The stub of a context's Dispatcher. */
export function dispatcherStub(env: Env, scope: DispatchScope): DurableObjectStub<Dispatcher> {
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
