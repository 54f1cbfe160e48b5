import type { Keys } from "../keys.js";
import type { PermissionList } from "../auth/permissions.js";
import type { ContextLimitsUpdate, RetentionPolicy } from "../model/index.js";
import { encodePairs } from "./codec.js";
import { ConflictError, NotFoundError } from "./errors.js";
import { KeyEpoch } from "./key-epoch.js";
import type { KeyHolders } from "./key-holders.js";
import { codecs } from "./layouts.js";
import { callRedis, type Redis } from "./redis.js";
import { changePermission, deleteNamespace, dropRunners } from "./scripts/context.js";
import { updateRecord } from "./scripts/record.js";

/** Context operations beyond plain records: in-place permission changes and deletion. */
export class ContextAdmin {
  constructor(
    private readonly redis: Redis,
    private readonly keys: Keys,
    private readonly now: () => number,
    private readonly holders: KeyHolders,
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

  /** Sets the context's own retention settings in place (undefined: none, the defaults hold). */
  async setRetention(contextId: number, retention: RetentionPolicy | undefined): Promise<void> {
    const fields = encodePairs(codecs.context, { ...(retention ? { retention } : {}), updated_at: this.now() });
    const removed = retention ? [] : ["retention"];
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
   * Begins deleting a context: it is marked (`deleting_since`; every caller finds it gone from
   * then on) and listed in `deleting:context` and `sweep:due`, so the sweep carries the deletion
   * on if this request does not finish it. False when there is no such context. Safe to repeat.
   */
  async beginDeletion(contextId: number, nowMs: number): Promise<boolean> {
    await callRedis(async () => {
      const p = this.redis.pipeline();
      p.zadd(this.keys.contextsDeleting(), { nx: true }, { score: nowMs, member: String(contextId) });
      p.zadd(this.keys.sweepDue(), { score: nowMs, member: String(contextId) });
      return p.exec();
    });
    const fields = encodePairs(codecs.context, { deleting_since: Math.floor(nowMs / 1000) });
    return (await updateRecord.run(this.redis, [this.keys.context(contextId)], [0, ...fields])) === 1;
  }

  /**
   * Deletes up to `count` of the context's runners; resolves with how many (0: none left). Their
   * ids are read first, so that the script is given every key it deletes, and their keys, so that
   * the global hint of who holds a key (KeyHolders) forgets them afterwards (a hint left by a step
   * cut short names nobody: every read checks it).
   */
  async dropRunners(contextId: number, count: number): Promise<number> {
    const index = this.keys.index(contextId, "runner");
    const ids = (await this.firstMembersOf(index, count)).map(Number);
    if (ids.length === 0) return 0;
    const pubkeys = await Promise.all(
      ids.map((id) =>
        callRedis(() => this.redis.exec<string | null>(["HGET", this.keys.runner(contextId, id), "pubkey"])),
      ),
    );
    const keys = ids.flatMap((id) => [this.keys.runner(contextId, id), this.keys.runnerSlots(contextId, id)]);
    const dropped = Number(await dropRunners.run(this.redis, [index, ...keys], ids));
    const forgotten = ids.flatMap((id, i) => {
      const pubkey = pubkeys[i];
      return pubkey ? [this.holders.forgetRunner(pubkey, contextId, id)] : [];
    });
    await Promise.all(forgotten);
    return dropped;
  }

  /** The first `count` members of one of the context's indexes (flows, jobs, schedules). */
  async firstMembers(contextId: number, index: "flow" | "job" | "schedule", count: number): Promise<string[]> {
    const key = index === "schedule" ? this.keys.scheduleIndex(contextId) : this.keys.index(contextId, index);
    return this.firstMembersOf(key, count);
  }

  private async firstMembersOf(key: string, count: number): Promise<string[]> {
    return (await callRedis(() => this.redis.exec<string[]>(["ZRANGE", key, "0", String(count - 1)]))).map(String);
  }

  /**
   * Deletes what is left of the context's namespace, a bounded batch per round trip (SCAN +
   * UNLINK), until `until` (epoch ms); true when it is empty. The context hash goes first.
   */
  async deleteNamespace(contextId: number, until: number): Promise<boolean> {
    const pattern = `${this.keys.namespace(contextId).replace(/[*?[\]\\]/g, "\\$&")}*`;
    // SCAN walks the whole keyspace: a deletion cut short carries on from where it was.
    const cursors = this.keys.deletionCursors();
    const field = String(contextId);
    let cursor = (await callRedis(() => this.redis.exec<string | null>(["HGET", cursors, field]))) ?? "0";
    do {
      cursor = String(await deleteNamespace.run(this.redis, [this.keys.context(contextId)], [cursor, pattern, 1000]));
      if (cursor !== "0" && Date.now() > until) {
        await callRedis(() => this.redis.exec(["HSET", cursors, field, cursor]));
        return false;
      }
    } while (cursor !== "0");
    return true;
  }

  /** Ends a context's deletion: out of the context index, the deletion list and the sweep's. */
  async endDeletion(contextId: number): Promise<void> {
    await callRedis(async () => {
      const p = this.redis.pipeline();
      p.zrem(this.keys.contextIndex(), String(contextId));
      p.zrem(this.keys.contextsDeleting(), String(contextId));
      p.zrem(this.keys.sweepDue(), String(contextId));
      p.hdel(this.keys.deletionCursors(), String(contextId));
      return p.exec();
    });
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
