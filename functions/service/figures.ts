import type { Scrape, Store } from "../../shared/store/index.js";
import type { Env } from "../core/env.js";
import { dispatcherStub } from "../core/stubs.js";

/** A scrape of storage, and how many job attempts wait in each active context's ready queues. */
export interface Figures extends Scrape {
  /** Context id → attempts waiting for a runner (a context with nothing active: 0; one that could not be counted: none). */
  waiting: Map<number, number>;
  /** When they were read (ms since 1970): a scrape within METRICS_CACHE_SECONDS of it may answer them again. */
  taken: number;
}

/** Figures as storage keeps them: `waiting` as [context, attempts] pairs, and the shape's version. */
type KeptFigures = Omit<Figures, "waiting"> & { waiting: [number, number][]; version: number };

/** The version of KeptFigures: a reading kept by code that kept another shape is read afresh, not misread. */
const KEPT_VERSION = 1;

/** Dispatchers asked at once while a scrape counts waiting work. */
const WAITING_CONCURRENCY = 20;
/**
 * How many freshness windows a kept reading is served for at most: past one, the next scrape
 * reads afresh while the others answer the kept one; past this many (the readers failed, or
 * nobody scraped), a scrape reads afresh itself.
 */
const KEPT_WINDOWS = 3;

/**
 * The figures of /metrics, no older than `freshSeconds` (0: read afresh). Within the window a
 * scrape answers the reading kept in storage (one GET, whatever the number of contexts); past it
 * one scrape at a time across isolates (it holds `metrics:refresh` for the window: at most one
 * fresh reading a window) reads afresh and keeps what it read, the others answer the kept
 * reading meanwhile. With no reading kept (none yet, or one older than KEPT_WINDOWS windows), a
 * scrape reads afresh. Kept in storage, not in the isolate, so every isolate answers alike.
 */
export async function readFigures(env: Env, store: Store, origin: string, freshSeconds: number): Promise<Figures> {
  const now = Date.now();
  if (freshSeconds <= 0) return readAfresh(env, store, origin, now);
  const windowMs = freshSeconds * 1000;
  const held = await store.metrics.kept();
  const kept = held && fromKept(held.reading);
  if (kept && (now - kept.taken < windowMs || !(await store.metrics.claimRefresh(windowMs)))) return kept;
  const fresh = await readAfresh(env, store, origin, now);
  const keeping: KeptFigures = { ...fresh, waiting: [...fresh.waiting], version: KEPT_VERSION };
  // Not keeping it costs the next scrape a fresh reading, nothing more: this one answers anyway.
  await store.metrics
    .keep(now, JSON.stringify(keeping), KEPT_WINDOWS * windowMs)
    .catch((error: Error) => console.warn(`metrics: the figures could not be kept: ${error.message}`));
  return fresh;
}

/** A kept reading, or undefined when it cannot be one of this code's (unreadable, or another version's). */
function fromKept(reading: string): Figures | undefined {
  try {
    const { version, ...kept } = JSON.parse(reading) as KeptFigures;
    if (version !== KEPT_VERSION) return undefined;
    return { ...kept, waiting: new Map(kept.waiting) };
  } catch {
    return undefined;
  }
}

/**
 * Everything /metrics reports that is the same whichever isolate answers: read from Redis
 * (`MetricsStore.scrape`), and from the Dispatcher of each context that has something active
 * (flows or jobs outside flows in its deadline set), which counts the attempts its ready queues
 * hold. A context with nothing active has nothing waiting, and costs no call; a context whose
 * Dispatcher could not be asked has no entry (its series is left out of that scrape).
 */
async function readAfresh(env: Env, store: Store, origin: string, now: number): Promise<Figures> {
  const scrape = await store.metrics.scrape(now);
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
  return { ...scrape, waiting, taken: now };
}
