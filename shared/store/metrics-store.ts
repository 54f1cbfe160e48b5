import type { Keys } from "../keys.js";
import { FlowStatus } from "../model/index.js";
import { callRedis, type Redis } from "./redis.js";
import { ScriptPipeline, type Reply } from "./script-batch.js";
import { countSets, foldFigures, keepFigures, readContextFigures } from "./scripts/metrics.js";

/** Most contexts one scrape reports on (the lowest ids); the rest are counted as omitted. */
export const SCRAPE_CONTEXT_LIMIT = 1_000;
/** Most pending figure records one fold takes from a context (the rest wait for the next one). */
export const FOLD_LIMIT = 1_000;
/** Contexts per pipelined round trip (and, on one Redis, per script call), so one request body stays small. */
const CONTEXTS_PER_PIPELINE = 100;
/**
 * Most figure records one call of readContextFigures folds over all its contexts (each at most
 * FOLD_LIMIT), so a call over 100 contexts never holds Redis for long; the rest wait for the next
 * reading, or the context's sweep.
 */
const FOLD_BUDGET = 2_000;

/** Counters as a hash holds them: field → integer. */
export type Counters = Record<string, number>;

/** What storage says about one context, for /metrics. */
export interface ContextFigures {
  id: number;
  /** Flows by status (the `index:flow:<status>` sets). */
  flows: Record<FlowStatus, number>;
  /** Flows and jobs outside flows still active (the deadline set): the dispatcher may have work waiting. */
  active: number;
  /** Entries of the dead-letter index. */
  deadLetters: number;
  /** The context's counters, figures folded in, and dead letters dropped past the cap (`Keys.contextCounters`). */
  counters: Counters;
  /** Each runner's slots held: attempts claimed or delivered and not ended. */
  runners: { id: number; inFlight: number }[];
}

/** One scrape's reading of storage: the same whichever isolate asks. */
export interface Scrape {
  /** Contexts in storage. */
  contexts: number;
  /** Contexts due for the sweep now. */
  due: number;
  /** Contexts beyond SCRAPE_CONTEXT_LIMIT, not reported on. */
  omitted: number;
  /** The coordinator's global counters (`Keys.counters`: sweeps). */
  counters: Counters;
  perContext: ContextFigures[];
}

/** What one cron run of the sweep did: contexts handed to their dispatchers, hand-offs that failed. */
export interface SweepCounts {
  contexts: number;
  failed: number;
}

/**
 * Figures that are true across isolates: every one is read from (or counted in) Redis, so any
 * isolate answers a scrape alike. A scrape folds each context's pending figure records into its
 * counters and reads them with the sets that hold the live state (readContextFigures: pop and
 * add in one step, so concurrent scrapes never count a record twice), then the runners' slot
 * sets (countSets): one script call each per 100 contexts on one Redis, per context on a
 * cluster. Bounded: at most SCRAPE_CONTEXT_LIMIT contexts, in pipelined round trips (see
 * `scrape` for the cost). What /metrics keeps of a scrape for the scrapes after it (`kept`, `keep`) is here too.
 */
export class MetricsStore {
  private readonly scripts: ScriptPipeline;

  constructor(
    private readonly redis: Redis,
    private readonly keys: Keys,
  ) {
    this.scripts = new ScriptPipeline(redis, [foldFigures, readContextFigures, countSets, keepFigures]);
  }

  /**
   * Reads every figure. Commands sent on one Redis: 4, plus per 100 contexts one EVALSHA
   * (readContextFigures) and, if any of them has runners, one more (countSets): 6 from 1 context
   * to 100, at most 24 at SCRAPE_CONTEXT_LIMIT. On a Redis Cluster the calls are per context (4 +
   * 2 per context with runners, 1 without). Inside Redis the scripts run per context LPOP,
   * HGETALL, ZRANGE and 9 ZCARD (one per flow status, deadlines, dead letters), one ZCARD per
   * runner, and one HINCRBY per counter field changed by records waiting to be folded (before: 11
   * commands sent per context and 1 per runner, each its own). Round trips: one, then one per 100
   * contexts, then one per 100 contexts that have runners (sent together).
   */
  async scrape(now: number): Promise<Scrape> {
    const [total, ids, due, counters] = await this.scripts.run((p) => {
      p.zcard(this.keys.contextIndex());
      p.zrange(this.keys.contextIndex(), 0, SCRAPE_CONTEXT_LIMIT - 1);
      p.zcount(this.keys.sweepDue(), "-inf", now);
      p.hgetall(this.keys.counters());
    });
    const contextIds = (ids as string[]).map(Number);
    const perContext = (
      await Promise.all(chunks(contextIds, CONTEXTS_PER_PIPELINE).map((chunk) => this.readContexts(chunk)))
    ).flat();
    return {
      contexts: Number(total),
      due: Number(due),
      omitted: Math.max(0, Number(total) - contextIds.length),
      counters: asCounters(counters ?? null),
      perContext,
    };
  }

  /**
   * Counts a cron run of the sweep in the global counters: the run, the contexts it handed to
   * their dispatchers, the hand-offs that failed (each context's own sweep counts itself when it
   * ends: settleContext). One round trip; an idle sweep's is one command (HINCRBY).
   */
  async countSweep(report: SweepCounts): Promise<void> {
    await this.scripts.run((p) => {
      const key = this.keys.counters();
      p.hincrby(key, "sweeps", 1);
      if (report.contexts > 0) p.hincrby(key, "swept", report.contexts);
      if (report.failed > 0) p.hincrby(key, "sweep_failures", report.failed);
    });
  }

  /**
   * Folds a context's figure records into its counters (up to FOLD_LIMIT), as a scrape does: a
   * context's sweep does it when records pile up, so they do not where nobody scrapes. One
   * script (EVALSHA, LPOP, and an HINCRBY per counter field changed).
   */
  async fold(contextId: number): Promise<void> {
    await this.scripts.run((p) =>
      p.script(
        foldFigures,
        [this.keys.contextFigures(contextId), this.keys.contextCounters(contextId)],
        [String(FOLD_LIMIT)],
      ),
    );
  }

  /** The reading of the figures kept by `keep`, with when it was taken; none when none is kept. One GET. */
  async kept(): Promise<{ taken: number; reading: string } | undefined> {
    const held = await callRedis(() => this.redis.get<string>(this.keys.metrics("kept")));
    const cut = held?.indexOf("\n") ?? -1;
    if (held === null || held === undefined || cut < 0) return undefined;
    return { taken: Number(held.slice(0, cut)), reading: held.slice(cut + 1) };
  }

  /**
   * Takes the right to read the figures afresh for `ms` (SET NX PX): one reader at a time across
   * isolates, and, held for the freshness window, at most one fresh reading a window.
   */
  async claimRefresh(ms: number): Promise<boolean> {
    const set = await callRedis(() => this.redis.set(this.keys.metrics("refresh"), "1", { nx: true, px: ms }));
    return set === "OK";
  }

  /** Keeps a reading taken at `taken` for `ms`, unless one taken later is kept already (keepFigures). */
  async keep(taken: number, reading: string, ms: number): Promise<void> {
    await this.scripts.run((p) =>
      p.script(keepFigures, [this.keys.metrics("kept")], [String(taken), reading, String(Math.ceil(ms))]),
    );
  }

  /**
   * Reads up to 100 contexts: their own keys with readContextFigures, then their runners' slot
   * sets with countSets. On one Redis a call reads every context of the chunk; on a Redis Cluster,
   * whose scripts name the keys of one slot only, a call per context (pipelined).
   */
  private async readContexts(ids: number[]): Promise<ContextFigures[]> {
    if (ids.length === 0) return [];
    const calls = this.keys.cluster ? ids.map((id) => [id]) : [ids];
    const replies = await this.scripts.run((p) => {
      for (const call of calls)
        p.script(
          readContextFigures,
          call.flatMap((id) => this.contextKeys(id)),
          [String(FOLD_LIMIT), String(this.keys.cluster ? FOLD_LIMIT : FOLD_BUDGET), String(call.length)],
        );
    });
    const perContext = replies.flatMap((reply) => reply as Reply[][]);
    const figures = ids.map((id, i) => asContextFigures(id, perContext[i] as Reply[]));
    const withRunners = figures.filter((c) => c.runners.length > 0);
    if (withRunners.length === 0) return figures;
    const slotCalls = this.keys.cluster ? withRunners.map((c) => [c]) : [withRunners];
    const held = await this.scripts.run((p) => {
      for (const call of slotCalls)
        p.script(
          countSets,
          call.flatMap((c) => c.runners.map((r) => this.keys.runnerSlots(c.id, r.id))),
          [],
        );
    });
    const sizes = held.flatMap((reply) => reply as Reply[]);
    withRunners.flatMap((c) => c.runners).forEach((r, i) => (r.inFlight = Number(sizes[i])));
    return figures;
  }

  /** A context's keys as readContextFigures takes them: figures, counters, runners, then the sets it counts. */
  private contextKeys(id: number): string[] {
    return [
      this.keys.contextFigures(id),
      this.keys.contextCounters(id),
      this.keys.index(id, "runner"),
      ...FlowStatus.options.map((status) => this.keys.flowsByStatus(id, status)),
      this.keys.deadlines(id),
      this.keys.deadLetterIndex(id),
    ];
  }
}

/** One context's reply of readContextFigures: after the fold, the counters and the runners, each flow status, deadlines, dead letters. */
function asContextFigures(id: number, reply: Reply[]): ContextFigures {
  const [, counters, runners, ...counts] = reply;
  const statuses = FlowStatus.options.length;
  const flows = Object.fromEntries(FlowStatus.options.map((status, s) => [status, Number(counts[s])])) as Record<
    FlowStatus,
    number
  >;
  return {
    id,
    flows,
    active: Number(counts[statuses]),
    deadLetters: Number(counts[statuses + 1]),
    counters: asCounters(counters ?? []),
    runners: (runners as string[]).map((r) => ({ id: Number(r), inFlight: 0 })),
  };
}

/** A flat HGETALL reply (or an empty one) as counters. */
function asCounters(reply: Reply): Counters {
  const flat = Array.isArray(reply) ? reply : [];
  const counters: Counters = {};
  for (let i = 0; i + 1 < flat.length; i += 2) counters[String(flat[i])] = Number(flat[i + 1]);
  return counters;
}

function chunks<T>(items: T[], size: number): T[][] {
  const out: T[][] = [];
  for (let i = 0; i < items.length; i += size) out.push(items.slice(i, i + size));
  return out;
}
