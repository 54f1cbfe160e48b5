import type { Keys } from "../keys.js";
import type { Redis } from "./redis.js";
import { takeFlowStart } from "./scripts/throttle.js";

/** Rate limits kept in Redis, the same for every isolate. */
export class Throttles {
  constructor(
    private readonly redis: Redis,
    private readonly keys: Keys,
  ) {}

  /**
   * Takes one flow start in a context allowed `perMinute` of them (all of them may come at once,
   * then one every 60/perMinute s): 0 when taken, else the ms to wait before asking again.
   */
  async takeFlowStart(contextId: number, perMinute: number, now = Date.now()): Promise<number> {
    const interval = Math.ceil(60_000 / perMinute);
    return Number(await takeFlowStart.run(this.redis, [this.keys.flowStarts(contextId)], [now, interval, perMinute]));
  }
}
