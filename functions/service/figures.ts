import type { Scrape, Store } from "../../shared/store/index.js";
import type { Env } from "../core/env.js";
import { dispatcherStub } from "../core/stubs.js";

/** A scrape of storage, and how many job attempts wait in each active context's ready queues. */
export interface Figures extends Scrape {
  /** Context id → attempts waiting for a runner (a context with nothing active: 0; one that could not be counted: none). */
  waiting: Map<number, number>;
}

/** Dispatchers asked at once while a scrape counts waiting work. */
const WAITING_CONCURRENCY = 20;

/**
 * Everything /metrics reports that is the same whichever isolate answers: read from Redis
 * (`MetricsStore.scrape`), and from the Dispatcher of each context that has something active
 * (flows or jobs outside flows in its deadline set), which counts the attempts its ready queues
 * hold. A context with nothing active has nothing waiting, and costs no call; a context whose
 * Dispatcher could not be asked has no entry (its series is left out of that scrape).
 */
export async function readFigures(env: Env, store: Store, origin: string): Promise<Figures> {
  const scrape = await store.metrics.scrape(Date.now());
  const active = scrape.perContext.filter((c) => c.active > 0).map((c) => c.id);
  const waiting = new Map<number, number>(scrape.perContext.filter((c) => c.active === 0).map((c) => [c.id, 0]));
  for (let i = 0; i < active.length; i += WAITING_CONCURRENCY) {
    await Promise.all(
      active.slice(i, i + WAITING_CONCURRENCY).map(async (contextId) => {
        const scope = { prefix: store.keys.prefix, contextId, origin };
        try {
          waiting.set(contextId, await dispatcherStub(env, scope).waiting(scope));
        } catch (error) {
          // One dispatcher out of reach leaves its context's series out, not the whole scrape.
          console.warn(`metrics: the dispatcher of context ${contextId} could not count: ${(error as Error).message}`);
        }
      }),
    );
  }
  return { ...scrape, waiting };
}
