import type { Keys } from "../keys.js";
import type { PermissionList } from "../auth/permissions.js";
import type { ContextLimitsUpdate } from "../model/index.js";
import { encodePairs } from "./codec.js";
import { ConflictError, NotFoundError } from "./errors.js";
import { KeyEpoch } from "./key-epoch.js";
import { codecs } from "./layouts.js";
import { callRedis, type Redis } from "./redis.js";
import { changePermission, deleteNamespace } from "./scripts/context.js";
import { updateRecord } from "./scripts/record.js";

/** Context operations beyond plain records: in-place permission changes and deletion. */
export class ContextAdmin {
  constructor(
    private readonly redis: Redis,
    private readonly keys: Keys,
    private readonly now: () => number,
  ) {}

  /** Adds an actor to a list; false when it was already there. */
  grant(contextId: number, list: PermissionList, actorId: number): Promise<boolean> {
    return this.change(contextId, list, actorId, "grant");
  }

  /** Removes an actor from a list; false when it was not there. The last admin cannot go. */
  revoke(contextId: number, list: PermissionList, actorId: number): Promise<boolean> {
    return this.change(contextId, list, actorId, "revoke");
  }

  /**
   * Holds (or releases) dispatch: while paused no runner is given work (claimWork) and no mail
   * is relayed (relayClaim). Patches the context in place and never creates it (NotFoundError
   * once it is gone).
   */
  async setPaused(contextId: number, paused: boolean): Promise<void> {
    const fields = encodePairs(codecs.context, { ...(paused ? { paused } : {}), updated_at: this.now() });
    const removed = paused ? [] : ["paused"];
    const updated = await updateRecord.run(
      this.redis,
      [this.keys.context(contextId)],
      [removed.length, ...removed, ...fields],
    );
    if (updated !== 1) throw new NotFoundError("context", String(contextId));
  }

  /**
   * Sets the context's limits in place: a number sets one, null clears it, an absent one stays.
   * The claim script reads `max_inflight`; submissions read `flow_starts_per_minute`.
   */
  async setLimits(contextId: number, limits: ContextLimitsUpdate): Promise<void> {
    const set = Object.fromEntries(Object.entries(limits).filter(([, v]) => v !== null && v !== undefined));
    const removed = Object.entries(limits)
      .filter(([, v]) => v === null)
      .map(([k]) => k);
    const fields = encodePairs(codecs.context, { ...set, updated_at: this.now() });
    const updated = await updateRecord.run(
      this.redis,
      [this.keys.context(contextId)],
      [removed.length, ...removed, ...fields],
    );
    if (updated !== 1) throw new NotFoundError("context", String(contextId));
  }

  /** Whether dispatch is held in the context. */
  async isPaused(contextId: number): Promise<boolean> {
    return (
      (await callRedis(() => this.redis.exec<string | null>(["HGET", this.keys.context(contextId), "paused"]))) ===
      "true"
    );
  }

  /**
   * Deletes the context and every key in its namespace, a bounded batch per round trip; the
   * context hash goes first, so nothing can act in it once deletion has begun; the key epoch is
   * bumped last, so its runners' keys stop working in every isolate. Safe to repeat.
   */
  async delete(contextId: number): Promise<void> {
    const pattern = `${this.keys.namespace(contextId).replace(/[*?[\]\\]/g, "\\$&")}*`;
    let cursor = "0";
    do {
      cursor = String(await deleteNamespace.run(this.redis, [this.keys.context(contextId)], [cursor, pattern, 1000]));
    } while (cursor !== "0");
    await callRedis(() => this.redis.exec(["ZREM", this.keys.contextIndex(), String(contextId)]));
    // Its runners' keys went with it: every isolate drops its cached keys (key-epoch.ts).
    await new KeyEpoch(this.redis, this.keys).bump();
  }

  private async change(
    contextId: number,
    list: PermissionList,
    actorId: number,
    op: "grant" | "revoke",
  ): Promise<boolean> {
    const result = await changePermission.run(
      this.redis,
      [this.keys.context(contextId)],
      [list, actorId, op, this.now()],
    );
    if (result === -1) throw new NotFoundError("context", String(contextId));
    if (result === -2)
      throw new ConflictError(
        "context",
        String(contextId),
        `actor ${actorId} is the last admin of context ${contextId}; grant another admin first`,
      );
    return result === 1;
  }
}
