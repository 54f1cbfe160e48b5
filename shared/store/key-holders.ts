import type { Keys } from "../keys.js";
import { pairsToObject } from "./codec.js";
import { callRedis, type Redis } from "./redis.js";
import { forgetRunnerKey } from "./scripts/runner.js";

/** Who holds a public key: the actor registered with it, and the runners registered with it. */
export interface KeyHolding {
  actorId?: number;
  runners: { contextId: number; runnerId: number }[];
}

/** The most runners a key's holding names (a key is one runner's per context, so this many contexts). */
export const RUNNERS_NAMED = 20;

/**
 * Who holds a public key, for telling a person what the key they hold is (`GET /v1/whoami`):
 * the actor from `actor_key:<pubkey>`, the runners from the hint `runner_key:<pubkey>`. A runner
 * is one context's, its key indexed in the context's `runner_keys` by the script that writes
 * the runner; the hint lives in another slot, so it is written after that script and every
 * entry read is checked against the context's own index: an entry left behind (a runner removed
 * between the two writes, a context deleted) names nobody. Runners registered before the hint
 * existed are not in it until their key is written again.
 */
export class KeyHolders {
  constructor(
    private readonly redis: Redis,
    private readonly keys: Keys,
  ) {}

  /** Notes that runner `runnerId` of `contextId` holds `pubkey` (after the runner's own script stored it). */
  async noteRunner(pubkey: string, contextId: number, runnerId: number): Promise<void> {
    await callRedis(() =>
      this.redis.exec(["HSET", this.keys.runnersByKey(pubkey), String(contextId), String(runnerId)]),
    );
  }

  /** Forgets that runner `runnerId` of `contextId` holds `pubkey`, unless another runner there holds it now. */
  async forgetRunner(pubkey: string, contextId: number, runnerId: number): Promise<void> {
    await forgetRunnerKey.run(this.redis, [this.keys.runnersByKey(pubkey)], [String(contextId), String(runnerId)]);
  }

  /** Who holds `pubkey` now: two round trips (the two indexes, then each entry checked). */
  async of(pubkey: string): Promise<KeyHolding> {
    const [actor, hinted] = await Promise.all([
      callRedis(() => this.redis.exec<string | null>(["GET", this.keys.actorByKey(pubkey)])),
      callRedis(() => this.redis.exec<string[]>(["HGETALL", this.keys.runnersByKey(pubkey)])),
    ]);
    const entries = Object.entries(pairsToObject(hinted ?? []))
      .map(([context, runner]) => ({ contextId: Number(context), runnerId: Number(runner) }))
      .sort((a, b) => a.contextId - b.contextId)
      .slice(0, RUNNERS_NAMED);
    const [actorExists, ...holders] = await Promise.all([
      actor === null ? 0 : callRedis(() => this.redis.exec<number>(["EXISTS", this.keys.actor(Number(actor))])),
      ...entries.map((e) =>
        callRedis(() => this.redis.exec<string | null>(["HGET", this.keys.runnerKeys(e.contextId), pubkey])),
      ),
    ]);
    const runners = entries.filter((e, i) => holders[i] === String(e.runnerId));
    return Number(actorExists) === 1 ? { actorId: Number(actor), runners } : { runners };
  }
}
