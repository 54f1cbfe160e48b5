import type { Keys } from "../keys.js";
import { callRedis, type Redis } from "./redis.js";
import { releaseKey } from "./scripts/actor.js";

/**
 * The one-key-one-actor index (`actor_key:<pubkey>` → actor id). It lives beside the actor
 * hashes rather than in a script with them (they hash to different cluster slots), so every
 * step is a compare-and-set that is safe to repeat, and a claim whose actor never appeared is
 * treated as stale.
 */
export class ActorKeys {
  constructor(
    private readonly redis: Redis,
    private readonly keys: Keys,
  ) {}

  /** The actor a key is registered to, or null. */
  async lookup(pubkey: string): Promise<number | null> {
    const id = await callRedis(() => this.redis.exec<string | null>(["GET", this.keys.actorByKey(pubkey)]));
    return id === null ? null : Number(id);
  }

  /** Claims a key for an actor; returns the actor that holds it (this one when the claim won). */
  async claim(pubkey: string, actorId: number): Promise<number> {
    const key = this.keys.actorByKey(pubkey);
    const won = await callRedis(() => this.redis.exec<string | null>(["SET", key, String(actorId), "NX"]));
    if (won !== null) return actorId;
    return (await this.lookup(pubkey)) ?? actorId;
  }

  /** Overwrites a stale claim (one whose actor does not exist). */
  async reclaim(pubkey: string, actorId: number): Promise<void> {
    await callRedis(() => this.redis.exec(["SET", this.keys.actorByKey(pubkey), String(actorId)]));
  }

  /** Releases a key if this actor holds it. */
  async release(pubkey: string, actorId: number): Promise<void> {
    await releaseKey.run(this.redis, [this.keys.actorByKey(pubkey)], [actorId]);
  }
}
