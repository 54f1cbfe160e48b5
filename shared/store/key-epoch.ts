import { randomHex } from "../auth/index.js";
import type { Keys } from "../keys.js";
import { callRedis, type Redis } from "./redis.js";

/**
 * What one read of the key epoch tells: the epoch, and the identity of the database it was read
 * from (`Keys.storeIdentity`).
 */
export interface EpochReading {
  /**
   * The identity and the epoch together (`<identity>/<epoch>`): what a cache compares. A wiped or
   * replaced database changes it even where its counter starts over at a value seen before.
   */
  epoch: string;
  /** The database's identity: `<ms>.<random>`, made at its first use. */
  identity: string;
  /** When the identity was made (epoch ms): nothing this database holds is older. */
  bornMs: number;
}

/**
 * The key-revocation epoch (`Keys.keyEpoch`): bumped after every removal or change of an actor's
 * or a runner's public key, read by each isolate at most once a second before it trusts its
 * cache of public keys (functions/core/key-cache.ts). One command each; the database's identity
 * comes with the epoch in the same command (MGET), and is written (SET NX, a second command) only
 * by the first read that finds none: once per database, and again after it was wiped. On a Redis
 * Cluster the two keys are in two slots: two GETs in one pipeline (one round trip, two commands).
 */
export class KeyEpoch {
  constructor(
    private readonly redis: Redis,
    private readonly keys: Keys,
  ) {}

  /** The current epoch ("0" before the first bump) and the database's identity. */
  async read(): Promise<EpochReading> {
    const [epoch, found] = await callRedis(() => {
      if (!this.keys.cluster) {
        return this.redis.exec<(string | number | null)[]>(["MGET", this.keys.keyEpoch(), this.keys.storeIdentity()]);
      }
      const p = this.redis.pipeline();
      p.get(this.keys.keyEpoch());
      p.get(this.keys.storeIdentity());
      return p.exec<(string | number | null)[]>();
    });
    const identity = found === null || found === undefined ? await this.makeIdentity() : String(found);
    const counter = epoch === null || epoch === undefined ? "0" : String(epoch);
    return { epoch: `${identity}/${counter}`, identity, bornMs: bornOf(identity) };
  }

  /**
   * Writes a new identity unless one is there (SET NX GET): the identity that holds, whoever
   * wrote it. No expiry: it lives as long as the database's data does.
   */
  private async makeIdentity(): Promise<string> {
    const made = `${Date.now()}.${randomHex(8)}`;
    const previous = await callRedis(() =>
      this.redis.exec<string | null>(["SET", this.keys.storeIdentity(), made, "NX", "GET"]),
    );
    return previous === null || previous === undefined ? made : String(previous);
  }

  /**
   * Bumps the epoch: to be called once the key's change is in storage (never before: an isolate
   * that saw the new epoch first could cache the old key again). A repeat is harmless.
   */
  async bump(): Promise<void> {
    await callRedis(() => this.redis.exec(["INCR", this.keys.keyEpoch()]));
  }
}

/** When an identity was made (its first part); 0 for one this code did not write. */
function bornOf(identity: string): number {
  const ms = Number(identity.split(".")[0]);
  return Number.isSafeInteger(ms) && ms > 0 ? ms : 0;
}
