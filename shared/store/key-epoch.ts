import type { Keys } from "../keys.js";
import { callRedis, type Redis } from "./redis.js";

/**
 * The key-revocation epoch (`Keys.keyEpoch`): bumped after every removal or change of an actor's
 * or a runner's public key, read by each isolate at most once a second before it trusts its
 * cache of public keys (functions/core/key-cache.ts). One command each.
 */
export class KeyEpoch {
  constructor(
    private readonly redis: Redis,
    private readonly keys: Keys,
  ) {}

  /** The current epoch ("0" before the first bump). */
  async read(): Promise<string> {
    return (await callRedis(() => this.redis.exec<string | null>(["GET", this.keys.keyEpoch()]))) ?? "0";
  }

  /**
   * Bumps the epoch: to be called once the key's change is in storage (never before: an isolate
   * that saw the new epoch first could cache the old key again). A repeat is harmless.
   */
  async bump(): Promise<void> {
    await callRedis(() => this.redis.exec(["INCR", this.keys.keyEpoch()]));
  }
}
