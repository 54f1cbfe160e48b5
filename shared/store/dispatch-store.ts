import type { Keys } from "../keys.js";
import { callRedis, type Redis } from "./redis.js";
import type { ReadyQueue } from "./ready-queue.js";
import { formatPushRunners, type PushRunnerName } from "./push-runners.js";
import { ScriptKeys } from "./script.js";
import { claimWork, markContext, settleWork } from "./scripts/dispatch.js";

/**
 * A runner as a claim sees it: its id, how many slots it has, and whether it takes work now (a
 * runner in backoff, or a pull runner when push runners are served, is only counted).
 */
export interface ClaimRunner {
  id: number;
  concurrency: number;
  takes: boolean;
  /** The queues it may take from: `serves(queue, runner)`. */
  serves(queue: ReadyQueue): boolean;
}

/** A work item given to a runner, and the queue it came from (where it goes back if refused). */
export interface Claim {
  runner: number;
  item: string;
  queue: ReadyQueue;
}

/** What a claim did: the claims, and the queues it found empty. */
export interface ClaimResult {
  claims: Claim[];
  drained: ReadyQueue[];
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

/** Most items of one settle group (one command in the script). */
const GROUP = 1_000;

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

  /**
   * Gives ready attempts to runners with free slots, atomically, from `queues` in turn order
   * (priority first, then whose turn it is): none while the context is paused, never past a
   * runner's concurrency, a flow's max_parallel or the context's max_inflight. Queues no runner
   * that takes work serves are left out of the call.
   */
  async claim(
    contextId: number,
    runners: ClaimRunner[],
    queues: ReadyQueue[],
    limit = CLAIM_LIMIT,
    now = Date.now(),
  ): Promise<ClaimResult> {
    const served = queues
      .map((queue) => ({
        queue,
        serving: runners.flatMap((r, i) => (r.takes && r.serves(queue) ? [i + 1] : [])),
      }))
      .filter((q) => q.serving.length > 0);
    if (served.length === 0 || limit <= 0) return { claims: [], drained: [] };
    const keys = [
      this.keys.context(contextId),
      ...served.map((q) => q.queue.key),
      ...runners.map((r) => this.keys.runnerSlots(contextId, r.id)),
    ];
    const perFlow = served.some((q) => q.queue.maxParallel !== undefined);
    const reply = (await claimWork.run(this.redis, keys, [
      now,
      served.length,
      runners.length,
      Math.min(limit, CLAIM_LIMIT),
      perFlow ? "1" : "0",
      ...runners.flatMap((r) => [r.id, r.takes ? r.concurrency : -1]),
      ...served.flatMap(({ queue, serving }) => [
        queue.priority,
        queue.flow,
        queue.maxParallel ?? 0,
        serving.length,
        ...serving,
      ]),
    ])) as [unknown[], unknown[]];
    const [flat, drained] = reply;
    const queueAt = (position: unknown) => (served[Number(position) - 1] as (typeof served)[number]).queue;
    const claims: Claim[] = [];
    for (let i = 0; i + 2 < flat.length; i += 3) {
      claims.push({
        runner: (runners[Number(flat[i]) - 1] as ClaimRunner).id,
        item: String(flat[i + 1]),
        queue: queueAt(flat[i + 2]),
      });
    }
    return { claims, drained: drained.map(queueAt) };
  }

  /**
   * Tells commits which flows wait in the dispatcher's ring (`WAITING_NONE`, a flow's id, or
   * `WAITING_SEVERAL`): a commit claims its own work only when no other flow's queue waits.
   */
  async markWaiting(contextId: number, value: string): Promise<void> {
    await markContext.run(this.redis, [this.keys.context(contextId)], ["dispatch_waiting", value]);
  }

  /**
   * Names the context's push runners (at most PUSH_RUNNERS_NAMED) for the claims of commits made
   * by objects that have not delivered to any of them yet: a submission's reservation reads them
   * (FlowStore.reserve). A name is a candidate only: each claim checks the runner's record.
   */
  async namePushRunners(contextId: number, runners: readonly PushRunnerName[]): Promise<void> {
    await markContext.run(this.redis, [this.keys.context(contextId)], ["push_runners", formatPushRunners(runners)]);
  }

  /** How many attempts wait in these queues now (one round trip). */
  async waiting(queues: string[]): Promise<number> {
    if (queues.length === 0) return 0;
    const lengths = await callRedis(async () => {
      const p = this.redis.pipeline();
      for (const key of queues) p.llen(key);
      return (await p.exec()) as number[];
    });
    return lengths.reduce((sum, n) => sum + Number(n), 0);
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
    scriptKeys.at(this.keys.contextCounters(contextId));
    const args: string[] = [String(DELIVERED_SCORE)];
    // Groups of at most GROUP items: the script unpacks each into one command (Lua's unpack
    // takes some 8,000 values), and settlements owed across failed rounds add up.
    const groups = (kind: "D" | "G", byItems: Map<number, string[]>) => {
      for (const [runner, items] of byItems)
        for (let i = 0; i < items.length; i += GROUP) {
          const part = items.slice(i, i + GROUP);
          args.push(kind, at(this.keys.runnerSlots(contextId, runner)), String(part.length), ...part);
        }
    };
    groups("D", delivered);
    groups("G", byRunner(s.gone));
    for (const c of s.back)
      args.push("B", at(this.keys.runnerSlots(contextId, c.runner)), at(c.queue.key), "1", c.item);
    await settleWork.run(this.redis, scriptKeys.list, args);
  }

  /** Claims whose delivery was never settled (owed deliveries), with when each was claimed (epoch ms). */
  async unsettled(contextId: number, runnerIds: number[]): Promise<(Held & { claimedAt: number })[]> {
    if (runnerIds.length === 0) return [];
    const replies = await callRedis(async () => {
      const p = this.redis.pipeline();
      for (const id of runnerIds)
        p.zrange(this.keys.runnerSlots(contextId, id), "-inf", `(${DELIVERED_SCORE}`, {
          byScore: true,
          withScores: true,
        });
      return (await p.exec()) as (string | number)[][];
    });
    return runnerIds.flatMap((runner, i) => {
      const flat = replies[i] ?? [];
      const out: (Held & { claimedAt: number })[] = [];
      for (let k = 0; k + 1 < flat.length; k += 2)
        out.push({ runner, item: String(flat[k]), claimedAt: Number(flat[k + 1]) });
      return out;
    });
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
