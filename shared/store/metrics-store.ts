import type { Keys } from "../keys.js";
import { FlowStatus } from "../model/index.js";
import { callRedis, type Redis } from "./redis.js";
import { foldFigures } from "./scripts/metrics.js";

/** Most contexts one scrape reports on (the lowest ids); the rest are counted as omitted. */
export const SCRAPE_CONTEXT_LIMIT = 1_000;
/** Most pending figure records one fold takes from a context (the rest wait for the next one). */
export const FOLD_LIMIT = 1_000;
/** Contexts per pipelined round trip, so one request body stays small. */
const CONTEXTS_PER_PIPELINE = 100;

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

type Reply = string | number | null | Reply[];

/**
 * Figures that are true across isolates: every one is read from (or counted in) Redis, so any
 * isolate answers a scrape alike. A scrape folds each context's pending figure records into its
 * counters (one script per context: pop and add in one step, so concurrent scrapes never count a
 * record twice), then reads the counters and the sets that hold the live state. Bounded: at most
 * SCRAPE_CONTEXT_LIMIT contexts, in pipelined round trips (see `scrape` for the cost).
 */
export class MetricsStore {
  private sha: Promise<string> | undefined;

  constructor(
    private readonly redis: Redis,
    private readonly keys: Keys,
  ) {}

  /**
   * Reads every figure. Costs 4 commands, plus per context 10 (the fold's EVALSHA, LPOP and
   * HGETALL, 4 ZCARD of flows by status, ZCARD of the deadline and dead-letter sets, ZRANGE of
   * runners) plus one ZCARD per runner, plus one HINCRBY per counter field changed by records
   * waiting to be folded. Round trips: one, then one per 100 contexts, then one per 100 contexts
   * that have runners (sent together).
   */
  async scrape(now: number): Promise<Scrape> {
    const [total, ids, due, counters] = await this.pipeline((p) => {
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
    await this.pipeline((p) => {
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
    await this.pipeline((p) => this.queueFold(p, contextId, false));
  }

  /** One pipeline per chunk for the contexts' own keys, one for their runners' slot sets. */
  private async readContexts(ids: number[]): Promise<ContextFigures[]> {
    if (ids.length === 0) return [];
    // Replies per context, in this order: the fold's, one per flow status, deadlines, dead letters, runners.
    const statuses = FlowStatus.options.length;
    const PER_CONTEXT = 1 + statuses + 3;
    const replies = await this.pipeline((p) => {
      for (const id of ids) {
        this.queueFold(p, id, true);
        for (const status of FlowStatus.options) p.zcard(this.keys.flowsByStatus(id, status));
        p.zcard(this.keys.deadlines(id));
        p.zcard(this.keys.deadLetterIndex(id));
        p.zrange(this.keys.index(id, "runner"), 0, -1);
      }
    });
    const figures = ids.map((id, i): ContextFigures => {
      const at = i * PER_CONTEXT;
      const fold = replies[at] as Reply[];
      const flows = Object.fromEntries(
        FlowStatus.options.map((status, s) => [status, Number(replies[at + 1 + s])]),
      ) as Record<FlowStatus, number>;
      return {
        id,
        flows,
        active: Number(replies[at + 1 + statuses]),
        deadLetters: Number(replies[at + 2 + statuses]),
        counters: asCounters(fold[1] ?? []),
        runners: (replies[at + 3 + statuses] as string[]).map((r) => ({ id: Number(r), inFlight: 0 })),
      };
    });
    const runners = figures.flatMap((c) => c.runners.map((r) => ({ context: c.id, runner: r })));
    if (runners.length > 0) {
      const held = await this.pipeline((p) => {
        for (const { context, runner } of runners) p.zcard(this.keys.runnerSlots(context, runner.id));
      });
      runners.forEach(({ runner }, i) => (runner.inFlight = Number(held[i])));
    }
    return figures;
  }

  /** Queues a fold of a context's figure records (foldFigures), reading its counters back if `read`. */
  private queueFold(batch: Batch, contextId: number, read: boolean): void {
    batch.fold(
      [this.keys.contextFigures(contextId), this.keys.contextCounters(contextId)],
      [String(FOLD_LIMIT), read ? "read" : "count"],
    );
  }

  /**
   * Runs a batch as one pipeline and returns its replies. A script Redis does not know yet
   * (NOSCRIPT: a fresh or flushed Redis) is loaded and only those calls are sent again, so the
   * commands beside them (counters) are never applied twice.
   */
  private async pipeline(build: (batch: Batch) => void): Promise<Reply[]> {
    const sha = await (this.sha ??= sha1(foldFigures.source));
    return callRedis(async () => {
      const batch = new Batch(this.redis.pipeline(), sha);
      build(batch);
      const results = (await batch.pipeline.exec({ keepErrors: true })) as { result: Reply; error?: string }[];
      const failed = results.find((r) => r.error !== undefined && !r.error.startsWith("NOSCRIPT"));
      if (failed) throw new Error(failed.error);
      const missing = [...batch.scripts].filter(([at]) => results[at]?.error !== undefined);
      if (missing.length > 0) {
        await this.redis.exec(["SCRIPT", "LOAD", foldFigures.source]);
        const again = new Batch(this.redis.pipeline(), sha);
        for (const [, [keys, args]] of missing) again.fold(keys, args);
        const redone = (await again.pipeline.exec()) as Reply[];
        missing.forEach(([at], i) => (results[at] = { result: redone[i] as Reply }));
      }
      return results.map((r) => r.result);
    });
  }
}

/** Commands queued on a pipeline, counted, with the positions of the fold scripts among them. */
class Batch {
  private queued = 0;
  /** Position in the batch → the fold's KEYS and ARGV. */
  readonly scripts = new Map<number, [string[], string[]]>();

  constructor(
    readonly pipeline: ReturnType<Redis["pipeline"]>,
    private readonly sha: string,
  ) {}

  zcard(key: string): void {
    this.queue().zcard(key);
  }

  zcount(key: string, min: string, max: number): void {
    this.queue().zcount(key, min, max);
  }

  zrange(key: string, start: number, stop: number): void {
    this.queue().zrange(key, start, stop);
  }

  hgetall(key: string): void {
    this.queue().hgetall(key);
  }

  hincrby(key: string, field: string, by: number): void {
    this.queue().hincrby(key, field, by);
  }

  /** foldFigures (scripts/metrics.ts). */
  fold(keys: string[], args: string[]): void {
    this.scripts.set(this.queued, [keys, args]);
    this.queue().evalsha(this.sha, keys, args);
  }

  private queue(): ReturnType<Redis["pipeline"]> {
    this.queued++;
    return this.pipeline;
  }
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

/** The SHA-1 Redis knows a script by (EVALSHA). */
async function sha1(source: string): Promise<string> {
  const digest = await crypto.subtle.digest("SHA-1", new TextEncoder().encode(source));
  return [...new Uint8Array(digest)].map((b) => b.toString(16).padStart(2, "0")).join("");
}
