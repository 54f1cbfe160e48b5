import type { Keys } from "../keys.js";
import { callRedis, type Redis } from "./redis.js";

/** Signature nonces used by signed requests (runner webhooks keep theirs in the flow's object). */
export class NonceStore {
  constructor(
    private readonly redis: Redis,
    private readonly keys: Keys,
  ) {}

  /**
   * Records a nonce for `ttlSeconds`; false when it was used before. A runner's nonces live in
   * its context's slot (`contextId`). The value stored is this call's own token: should the
   * client retry the SET after it took effect (an unknown outcome), GET shows the same token back
   * and the nonce still counts as fresh.
   */
  async claim(keyid: string, nonce: string, contextId: number | undefined, ttlSeconds: number): Promise<boolean> {
    const token = crypto.randomUUID();
    const key = this.keys.nonce(keyid, nonce, contextId);
    const previous = await callRedis(() =>
      this.redis.exec<string | null>(["SET", key, token, "NX", "GET", "EX", String(ttlSeconds)]),
    );
    return previous === null || previous === token;
  }
}
