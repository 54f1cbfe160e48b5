import { deadlineMember, parseDeadlineMember, type DeadlineOwner, type Keys } from "../keys.js";
import { DELIVERED_SCORE } from "./dispatch-store.js";
import { callRedis, type Redis } from "./redis.js";
import type { ScriptReply } from "./script.js";
import { markContext } from "./scripts/dispatch.js";
import { claimDue, lookAtContext, settleContext } from "./scripts/sweep.js";

/** Windows (ms) of a context's retention, and the `retention` field they were made from (null: none). */
export interface SweepPolicy {
  raw: string | null;
  finishedMs: number;
  errorMs: number;
  inboxMs: number;
}

/** What a context has for its sweep (lookAtContext). */
export interface ContextLook {
  /** Flows (and jobs outside flows) whose check time passed, at most the limit asked for. */
  due: DeadlineOwner[];
  /** The context's `retention` field as stored (null: none of its own). */
  retention: string | null;
  /** False when that field is not the one the windows asked with came from: nothing below about retention holds. */
  held: boolean;
  /** When retention next has something to remove (epoch ms), if anything. */
  retentionAt?: number;
  /** When its deletion began (epoch ms), if it is being deleted. */
  deletingSince?: number;
  /** The token of a wake of its dispatcher that failed (the sweep owes it), if any. */
  wakeOwed?: string;
  /** Messages waiting in msg_out. */
  waitingMail: number;
  /** When the oldest message the relay holds must be settled (epoch ms), if it holds any. */
  firstInFlight?: number;
  /** Figure records waiting to be folded. */
  figures: number;
  /** The oldest claim not yet delivered in the slot sets asked about (epoch ms), if any. */
  oldestClaim?: number;
}

/** How a context's sweep ended (settleContext). */
export interface SweepEnd {
  /** The sweep left more to do: due again at once. */
  more: boolean;
  /** The wake owed it carried out (its token), taken away unless another failed since. */
  wakeOwed?: string;
  poked: number;
  failed: number;
}

const DUE_SOON_MS = 60_000;

/**
 * The supervisor's bookkeeping: `sweep:due`, the contexts with something due and when, and each
 * context's deadline set, its flows by next check time. A context's sweep is two calls: a look
 * (`look`) and its end (`settle`), which sets the next due time from the context's keys as they
 * are then.
 */
export class SweepStore {
  constructor(
    private readonly redis: Redis,
    private readonly keys: Keys,
  ) {}

  /** Whether any context is due at `now` (one plain read: an idle sweep runs no script). */
  async anyDue(now: number): Promise<boolean> {
    const first = await callRedis(() =>
      this.redis.exec<string[]>(["ZRANGEBYSCORE", this.keys.sweepDue(), "-inf", String(now), "LIMIT", "0", "1"]),
    );
    return first.length > 0;
  }

  /** Takes up to `limit` contexts due at `now`, each pushed to `leaseUntil` meanwhile (one script). */
  async claim(now: number, leaseUntil: number, limit: number): Promise<number[]> {
    const due = (await claimDue.run(this.redis, [this.keys.sweepDue()], [now, leaseUntil, limit])) as string[];
    return due.map(Number);
  }

  /** Makes a context due by `at` at the latest (an earlier due time stands). */
  async dueBy(contextId: number, at: number): Promise<void> {
    await callRedis(() => this.redis.exec(["ZADD", this.keys.sweepDue(), "LT", String(at), String(contextId)]));
  }

  /**
   * Makes a context due within a minute (the sweep's own period), best effort: something new
   * waits there that the sweep schedules from then on (mail in an inbox, a flow that never
   * started), and a failure only leaves it to whatever makes the context due later.
   */
  async dueSoon(contextId: number): Promise<void> {
    await this.dueBy(contextId, Date.now() + DUE_SOON_MS).catch(() => undefined);
  }

  /**
   * A wake of the context's dispatcher failed: the sweep owes it, within a minute (`wake_owed` in
   * the context's hash, only while the context exists). The token is written first, so a sweep
   * that ends meanwhile counts it, whichever way the two interleave. Best effort, as `dueSoon`.
   */
  async oweWake(contextId: number): Promise<void> {
    const token = `${Date.now()}.${crypto.randomUUID()}`;
    try {
      await markContext.run(this.redis, [this.keys.context(contextId)], ["wake_owed", token]);
      await this.dueBy(contextId, Date.now() + DUE_SOON_MS);
    } catch {
      // Storage away too: the wake is lost with it (the runner list is trusted 5 minutes at most).
    }
  }

  /**
   * What a context has for its sweep, in one call: its due flows (at most `limit`), its mail,
   * retention and deletion, a wake owed, and the oldest undelivered claim in `runnerIds`' slots.
   */
  async look(
    contextId: number,
    now: number,
    policy: SweepPolicy,
    runnerIds: number[],
    limit: number,
  ): Promise<ContextLook> {
    const keys = [...this.contextKeys(contextId), ...runnerIds.map((id) => this.keys.runnerSlots(contextId, id))];
    const args = [...this.contextArgs(contextId, now, policy), limit, DELIVERED_SCORE];
    // On a Redis Cluster the list of deletions is in another slot: read beside the script.
    const [reply, listed] = await Promise.all([
      lookAtContext.run(this.redis, keys, args) as Promise<ScriptReply[]>,
      this.keys.cluster
        ? callRedis(() => this.redis.exec<string | null>(["ZSCORE", this.keys.contextsDeleting(), String(contextId)]))
        : undefined,
    ]);
    const [due, raw, held, retentionAt, fromScript, owed, waiting, inflight, figures, oldest] = reply;
    const deleting = this.keys.cluster ? (listed ?? -1) : fromScript;
    const when = (n: ScriptReply | undefined) => (Number(n) >= 0 ? Number(n) : undefined);
    const optional = <K extends string, V>(key: K, value: V | undefined) =>
      value === undefined ? {} : ({ [key]: value } as Record<K, V>);
    return {
      due: (due as string[]).flatMap((m) => parseDeadlineMember(String(m)) ?? []),
      retention: raw === null || raw === undefined ? null : String(raw),
      held: Number(held) === 1,
      ...optional("retentionAt", when(retentionAt)),
      ...optional("deletingSince", when(deleting)),
      ...optional("wakeOwed", owed === null || owed === undefined ? undefined : String(owed)),
      waitingMail: Number(waiting),
      ...optional("firstInFlight", when(inflight)),
      figures: Number(figures),
      ...optional("oldestClaim", when(oldest)),
    };
  }

  /**
   * Ends a context's sweep: sets when it is next due from its keys as they are now (or takes it
   * out of sweep:due), takes away the wake owed it carried out, and counts it. Resolves with the
   * next due time (undefined: none).
   */
  async settle(contextId: number, now: number, policy: SweepPolicy, end: SweepEnd): Promise<number | undefined> {
    const args = [
      ...this.contextArgs(contextId, now, policy),
      end.more ? "1" : "0",
      end.wakeOwed ?? "",
      end.poked,
      end.failed,
    ];
    if (this.keys.cluster) return this.settleApart(contextId, now, args);
    const keys = [...this.contextKeys(contextId), this.keys.sweepDue(), this.keys.counters()];
    const at = await settleContext.run(this.redis, keys, args);
    return Number(at) >= 0 ? Number(at) : undefined;
  }

  /**
   * The settle on a Redis Cluster, where `sweep:due` and the counters are in another slot than
   * the context: the script computes the next due time in the context's slot, then the due set
   * and the counters are written, then the time is computed again (the same script, writing
   * nothing). A commit that started a flow between the first computation and the write had its
   * `ZADD LT` overwritten by a later time: the second computation sees its deadline (written
   * before its ZADD) and lowers the due time again. Three round trips instead of one.
   */
  private async settleApart(contextId: number, now: number, args: (string | number)[]): Promise<number | undefined> {
    const keys = this.contextKeys(contextId);
    const at = Number(await settleContext.run(this.redis, keys, args));
    const [poked, failed] = [Number(args[8]), Number(args[9])];
    await callRedis(async () => {
      const p = this.redis.pipeline();
      if (at >= 0) p.zadd(this.keys.sweepDue(), { score: at, member: String(contextId) });
      else p.zrem(this.keys.sweepDue(), String(contextId));
      p.hincrby(this.keys.counters(), "settled", 1);
      if (poked > 0) p.hincrby(this.keys.counters(), "poked", poked);
      if (failed > 0) p.hincrby(this.keys.counters(), "sweep_failures", failed);
      return p.exec();
    });
    // Never sooner than a second: a first computation that soon cannot be undercut.
    if (at >= 0 && at <= now + 1000) return at;
    const again = Number(await settleContext.run(this.redis, keys, [...args.slice(0, 7), "", 0, 0]));
    if (again < 0 || (at >= 0 && again >= at)) return at >= 0 ? at : undefined;
    await this.dueBy(contextId, again);
    return again;
  }

  /** Counts a context's sweep that ended without a settle: the one that finished its deletion. */
  async countSettled(): Promise<void> {
    await callRedis(() => this.redis.exec(["HINCRBY", this.keys.counters(), "settled", "1"]));
  }

  /** Sets (or, with undefined, clears) the check time of a flow or of a job outside any flow. */
  async setCheck(contextId: number, owner: DeadlineOwner, at: number | undefined): Promise<void> {
    const member = deadlineMember(owner);
    await callRedis(() =>
      at === undefined
        ? this.redis.exec(["ZREM", this.keys.deadlines(contextId), member])
        : this.redis.exec(["ZADD", this.keys.deadlines(contextId), String(at), member]),
    );
  }

  /** KEYS 1-9 of lookAtContext and settleContext, in their order. */
  private contextKeys(contextId: number): string[] {
    const k = this.keys;
    return [
      k.deadlines(contextId),
      k.msgOut(contextId),
      k.inflight(contextId),
      k.ended(contextId, "finished"),
      k.ended(contextId, "error"),
      k.inboxDue(contextId),
      k.context(contextId),
      k.cluster ? k.context(contextId) : k.contextsDeleting(),
      k.contextFigures(contextId),
    ];
  }

  /** ARGV 1-6 of lookAtContext and settleContext. */
  private contextArgs(contextId: number, now: number, policy: SweepPolicy): (string | number)[] {
    return [
      contextId,
      now,
      policy.raw === null ? "-" : `=${policy.raw}`,
      policy.finishedMs,
      policy.errorMs,
      policy.inboxMs,
    ];
  }
}
