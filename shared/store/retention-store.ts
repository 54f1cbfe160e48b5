import { deadlineMember, inboxEntry, parseDeadlineMember, type DeadlineOwner, type Keys } from "../keys.js";
import { FlowStatus, type ContextStored } from "../model/index.js";
import { callRedis, type Redis } from "./redis.js";
import { purgeOwner } from "./scripts/retention.js";

/** Keys deleted per purge call: a large flow is removed in several bounded calls. */
const PURGE_CHUNK = 500;

/** Everything a flow (or a job outside any flow) owns in Redis, as its object knows it. */
export interface PurgeTarget {
  contextId: number;
  owner: DeadlineOwner;
  callerId: number;
  /** The flow's jobs (none for a job outside any flow: the job is the owner). */
  jobIds: number[];
  /** Every message id its attempts used, in this run and in runs before a re-run, and its result's. */
  messageIds: number[];
  /** The id of its result message, which may still wait in the caller's inbox. */
  resultId?: number;
}

/**
 * What a purge found: removed now, removed before, the owner's status when it had not ended (or
 * a child's, naming it, when a child of the flow had not), or `kept`: a child flow that retention
 * leaves while its parent flow (named) is kept, since its parent's removal removes it.
 */
export type PurgeOutcome = "removed" | "gone" | { running: string; child?: number } | { kept: number };

/**
 * Retention: the ended flows and jobs waiting for their window to pass (`ended:<status>`), their
 * removal with everything they own, and the counts of what a context stores.
 */
export class RetentionStore {
  constructor(
    private readonly redis: Redis,
    private readonly keys: Keys,
  ) {}

  /** Flows and jobs outside flows that ended so before `before` (epoch ms), oldest first, at most `limit`. */
  async endedBefore(
    contextId: number,
    status: "finished" | "error",
    before: number,
    limit: number,
  ): Promise<DeadlineOwner[]> {
    const members = await callRedis(() =>
      this.redis.exec<string[]>([
        "ZRANGEBYSCORE",
        this.keys.ended(contextId, status),
        "-inf",
        `(${before}`,
        "LIMIT",
        "0",
        String(limit),
      ]),
    );
    return members.flatMap((m) => parseDeadlineMember(String(m)) ?? []);
  }

  /**
   * Moves an ended flow's entry to `at` (epoch ms), if it is still there (XX: never brings back
   * one a re-run took out): one that cannot be removed now (its jobs still run, its object fails)
   * waits a window again instead of standing in front of the others.
   */
  async postpone(contextId: number, status: "finished" | "error", owner: DeadlineOwner, at: number): Promise<void> {
    await callRedis(() =>
      this.redis.exec(["ZADD", this.keys.ended(contextId, status), "XX", String(at), deadlineMember(owner)]),
    );
  }

  /**
   * Removes a flow (or a job outside any flow) and all it owns, in bounded calls; with `force`
   * whatever its status (its context is being deleted), else only once it ended (the script
   * checks, so a flow re-run meanwhile is left alone).
   */
  async purge(target: PurgeTarget, force = false): Promise<PurgeOutcome> {
    const { contextId: ctx, owner, callerId } = target;
    const k = this.keys;
    const ownerKey = "flowId" in owner ? k.flow(ctx, owner.flowId) : k.job(ctx, owner.callerId, owner.jobId);
    const member = deadlineMember(owner);
    const resultKey = target.resultId !== undefined ? k.message(ctx, callerId, target.resultId) : undefined;
    // The result message goes too (left unread, it would outlive its flow: only its inbox
    // entries are taken out below).
    const doomed = [
      ...target.jobIds.map((id) => k.job(ctx, callerId, id)),
      ...target.messageIds.map((id) => k.message(ctx, callerId, id)),
      ...(resultKey ? [resultKey] : []),
    ];
    const indexes: [string, "Z" | "L", string[]][] = [
      [k.ended(ctx, "finished"), "Z", [member]],
      [k.ended(ctx, "error"), "Z", [member]],
      [k.deadlines(ctx), "Z", [member]],
      [
        k.index(ctx, "job"),
        "Z",
        [...target.jobIds, ...("jobId" in owner ? [owner.jobId] : [])].map((id) => `${callerId}:${id}`),
      ],
    ];
    if ("flowId" in owner) {
      indexes.push([k.index(ctx, "flow"), "Z", [String(owner.flowId)]]);
      // Every status index: a flow cancelled before it started was listed as dispatched too.
      for (const status of FlowStatus.options)
        indexes.push([k.flowsByStatus(ctx, status), "Z", [String(owner.flowId)]]);
    }
    if (resultKey) {
      indexes.push([k.inboxDue(ctx), "Z", [inboxEntry(callerId, resultKey)]]);
      indexes.push([k.msgIn(ctx, callerId), "L", [resultKey]]);
    }
    const mode = force ? "force" : "ended";
    /** One call: a chunk of keys to delete, and in the last the index entries and the owner. */
    const call = async (chunk: string[], last: boolean): Promise<string> => {
      const marks = last ? indexes : [];
      const args = [mode, last ? "1" : "0", String(marks.length)];
      for (const [, op, members] of marks) args.push(op, String(members.length), ...members);
      return String(await purgeOwner.run(this.redis, [ownerKey, ...marks.map(([key]) => key), ...chunk], args));
    };
    for (let at = 0; ; at += PURGE_CHUNK) {
      const last = at + PURGE_CHUNK >= doomed.length;
      const outcome = await call(doomed.slice(at, at + PURGE_CHUNK), last);
      if (outcome !== "removed" && outcome !== "gone") return { running: outcome };
      if (last) return outcome;
      // Removed before (or never there): its leftover index entries go, and no key.
      if (outcome === "gone" && !force) return (await call([], true)) as "gone";
    }
  }

  /** Whether the flow's record is still there (a child's parent: see functions/flow/purge-children.ts). */
  async flowExists(contextId: number, flowId: number): Promise<boolean> {
    const n = await callRedis(() => this.redis.exec<number>(["EXISTS", this.keys.flow(contextId, flowId)]));
    return Number(n) === 1;
  }

  /** Which of the flows `flowIds` still have a record (one round trip, however many). */
  async flowsExisting(contextId: number, flowIds: number[]): Promise<number[]> {
    if (flowIds.length === 0) return [];
    const found = await callRedis(async () => {
      const p = this.redis.pipeline();
      for (const id of flowIds) p.exists(this.keys.flow(contextId, id));
      return (await p.exec()) as unknown[];
    });
    return flowIds.filter((_, i) => Number(found[i]) === 1);
  }

  /** What a context stores, from its indexes (one round trip). */
  async stored(contextId: number): Promise<ContextStored> {
    const k = this.keys;
    const statuses = FlowStatus.options;
    const counted = [
      ...statuses.map((s) => k.flowsByStatus(contextId, s)),
      k.ended(contextId, "finished"),
      k.ended(contextId, "error"),
      k.index(contextId, "job"),
      k.index(contextId, "message"),
      k.inboxDue(contextId),
      k.deadLetterIndex(contextId),
      k.index(contextId, "runner"),
      k.scheduleIndex(contextId),
    ];
    const n = await callRedis(async () => {
      const p = this.redis.pipeline();
      for (const key of counted) p.zcard(key);
      return ((await p.exec()) as number[]).map(Number);
    });
    const at = (i: number) => n[i] ?? 0;
    const s = statuses.length;
    return {
      flows: Object.fromEntries(statuses.map((status, i) => [status, at(i)])) as ContextStored["flows"],
      ended: { finished: at(s), error: at(s + 1) },
      jobs: at(s + 2),
      messages: at(s + 3),
      unread_inbox: at(s + 4),
      dead_letters: at(s + 5),
      runners: at(s + 6),
      schedules: at(s + 7),
    };
  }
}
