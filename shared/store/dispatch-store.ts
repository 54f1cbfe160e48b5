import type { Keys } from "../keys.js";
import type { Runner } from "../model/index.js";
import { callRedis, type Redis } from "./redis.js";
import { ScriptKeys } from "./script.js";
import { claimWork, settleWork } from "./scripts/dispatch.js";

/** A runner as a claim sees it: how many slots it has and the queues it takes from, in order. */
export interface ClaimRunner {
  id: number;
  concurrency: number;
  queues: string[];
}

/** A work item given to a runner, and the queue it came from (where it goes back if refused). */
export interface Claim {
  runner: number;
  item: string;
  queue: string;
}

/** A work item holding a slot of a runner. */
export type Held = Omit<Claim, "queue">;

/**
 * How claims ended: delivered (the slot stays held), gone (the slot is freed), or back at the
 * front of the queue they came from (the runner refused).
 */
export interface WorkSettlement {
  delivered: Held[];
  gone: Held[];
  back: Claim[];
}

/** What the coordinator last saw go wrong delivering to a runner (for operators). */
export interface RunnerHealth {
  /** Why the last delivery failed: the runner's answer, or the network error. */
  last_error: string;
  /** When (epoch ms). */
  last_error_at: number;
  /** Deliveries that failed in a row. */
  failures: number;
  /** When the runner is tried again (epoch ms). */
  retry_at: number;
}

/**
 * The slot score of a delivered attempt: later than any claim time, so `unsettled` (claims older
 * than a time) never lists it.
 */
export const DELIVERED_SCORE = Number.MAX_SAFE_INTEGER;

/** Most items one claim takes (Lua's unpack has a limit, and a round should stay short). */
export const CLAIM_LIMIT = 500;

/**
 * Storage of dispatch: the ready queues, the runners' slot sets (global concurrency), and what
 * went wrong delivering to a runner. See scripts/dispatch.ts for the scripts.
 */
export class DispatchStore {
  constructor(
    private readonly redis: Redis,
    private readonly keys: Keys,
  ) {}

  /** The queues a runner takes work from, in order: jobs pinned to it, then its script types'. */
  queuesOf(runner: Pick<Runner, "context_id" | "id" | "script_types">): string[] {
    return [
      this.keys.pinnedQueue(runner.context_id, runner.id),
      ...runner.script_types.map((t) => this.keys.queue(runner.context_id, t)),
    ];
  }

  /**
   * Gives ready attempts to runners with free slots, atomically (none while the context is
   * paused). Resolves with the claims and each runner's free slots afterwards.
   */
  async claim(
    contextId: number,
    runners: ClaimRunner[],
    limit = CLAIM_LIMIT,
    now = Date.now(),
  ): Promise<{ claims: Claim[]; free: Map<number, number> }> {
    if (runners.length === 0 || limit <= 0) return { claims: [], free: new Map() };
    const queueKeys = new ScriptKeys();
    const perRunner = runners.flatMap((r) => {
      const positions = r.queues.map((q) => queueKeys.at(q));
      return [r.id, r.concurrency, positions.length, ...positions];
    });
    const queues = queueKeys.list;
    const keys = [
      this.keys.context(contextId),
      ...queues,
      ...runners.map((r) => this.keys.runnerSlots(contextId, r.id)),
    ];
    const reply = (await claimWork.run(this.redis, keys, [
      now,
      queues.length,
      runners.length,
      Math.min(limit, CLAIM_LIMIT),
      ...perRunner,
    ])) as [unknown[], unknown[]];
    const [flat, free] = reply;
    const claims: Claim[] = [];
    for (let i = 0; i + 2 < flat.length; i += 3) {
      claims.push({
        runner: (runners[Number(flat[i]) - 1] as ClaimRunner).id,
        item: String(flat[i + 1]),
        queue: queues[Number(flat[i + 2]) - 1] as string,
      });
    }
    return { claims, free: new Map(runners.map((r, i) => [r.id, Number(free[i] ?? 0)])) };
  }

  /**
   * Ends a round's claims in one call: a plain ZADD per runner when everything was delivered
   * (the common case), else the settleWork script.
   */
  async settle(contextId: number, s: WorkSettlement): Promise<void> {
    const byRunner = (claims: Held[]) => {
      const groups = new Map<number, string[]>();
      for (const c of claims) groups.set(c.runner, [...(groups.get(c.runner) ?? []), c.item]);
      return groups;
    };
    const delivered = byRunner(s.delivered);
    if (s.gone.length === 0 && s.back.length === 0) {
      if (delivered.size === 0) return;
      await callRedis(async () => {
        const p = this.redis.pipeline();
        for (const [runner, items] of delivered) {
          const [first, ...rest] = items.map((member) => ({ score: DELIVERED_SCORE, member }));
          if (first) p.zadd(this.keys.runnerSlots(contextId, runner), { xx: true, ch: true }, first, ...rest);
        }
        await p.exec();
      });
      return;
    }
    const scriptKeys = new ScriptKeys();
    const at = (key: string) => String(scriptKeys.at(key));
    const args: string[] = [String(DELIVERED_SCORE)];
    for (const [runner, items] of delivered)
      args.push("D", at(this.keys.runnerSlots(contextId, runner)), String(items.length), ...items);
    for (const [runner, items] of byRunner(s.gone))
      args.push("G", at(this.keys.runnerSlots(contextId, runner)), String(items.length), ...items);
    for (const c of s.back) args.push("B", at(this.keys.runnerSlots(contextId, c.runner)), at(c.queue), "1", c.item);
    await settleWork.run(this.redis, scriptKeys.list, args);
  }

  /** Claims older than `before` (epoch ms) whose delivery was never settled: owed deliveries. */
  async unsettled(contextId: number, runnerIds: number[], before: number): Promise<Held[]> {
    if (runnerIds.length === 0) return [];
    const replies = await callRedis(async () => {
      const p = this.redis.pipeline();
      for (const id of runnerIds)
        p.zrange(this.keys.runnerSlots(contextId, id), "-inf", `(${before}`, { byScore: true });
      return (await p.exec()) as string[][];
    });
    return runnerIds.flatMap((runner, i) => (replies[i] ?? []).map((item) => ({ runner, item: String(item) })));
  }

  /** How many attempts each runner holds now. */
  async held(contextId: number, runnerIds: number[]): Promise<Map<number, number>> {
    if (runnerIds.length === 0) return new Map();
    const counts = await callRedis(async () => {
      const p = this.redis.pipeline();
      for (const id of runnerIds) p.zcard(this.keys.runnerSlots(contextId, id));
      return (await p.exec()) as number[];
    });
    return new Map(runnerIds.map((id, i) => [id, Number(counts[i] ?? 0)]));
  }

  /** Puts work items at the end of a queue (a job message found where it does not belong). */
  async enqueue(queue: string, items: string[]): Promise<void> {
    if (items.length > 0) await callRedis(() => this.redis.rpush(queue, ...items));
  }

  /** What went wrong delivering to runners, by runner id (only runners with trouble). */
  async health(contextId: number): Promise<Map<number, RunnerHealth>> {
    const hash = await callRedis(() => this.redis.hgetall<Record<string, string>>(this.keys.runnerHealth(contextId)));
    const out = new Map<number, RunnerHealth>();
    for (const [id, json] of Object.entries(hash ?? {})) {
      try {
        out.set(Number(id), JSON.parse(json) as RunnerHealth);
      } catch {
        // an entry written by something else: not ours to show
      }
    }
    return out;
  }

  /** Records a runner's delivery trouble, or (null) that it is over. */
  async setHealth(contextId: number, runnerId: number, health: RunnerHealth | null): Promise<void> {
    const key = this.keys.runnerHealth(contextId);
    await callRedis(() =>
      health ? this.redis.hset(key, { [runnerId]: JSON.stringify(health) }) : this.redis.hdel(key, String(runnerId)),
    );
  }
}
