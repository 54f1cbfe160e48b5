import { deadlineMember, parseDeadlineMember, type DeadlineOwner, type Keys } from "../keys.js";
import { callRedis, type Redis } from "./redis.js";

/** What a context has that the supervisor's sweep should look at again, and when. */
export interface ContextChecks {
  /** The earliest check time of its flows (epoch ms), if any has one. */
  firstCheck?: number;
  /** Messages waiting in msg_out. */
  waitingMail: number;
  /** When the oldest message the relay holds must be settled (epoch ms), if it holds any. */
  firstInFlight?: number;
  /** When the oldest flow (or job outside flows) still kept ended so (epoch ms). */
  firstEnded: { finished?: number; error?: number };
  /** When the oldest message still in an inbox came (epoch ms). */
  firstInbox?: number;
  /** The context's own retention settings, as stored (JSON), if it has any. */
  retention?: string;
  /** When its deletion began (epoch ms), if it is being deleted. */
  deletingSince?: number;
}

/**
 * The supervisor's bookkeeping: `sweep:due`, the contexts with something due and when, and each
 * context's deadline set, its flows by next check time. Every call is one command (one round
 * trip), so an idle sweep costs exactly one.
 */
export class SweepStore {
  constructor(
    private readonly redis: Redis,
    private readonly keys: Keys,
  ) {}

  /** Contexts due at `now`, at most `limit`. */
  async dueContexts(now: number, limit: number): Promise<number[]> {
    const due = await callRedis(() =>
      this.redis.exec<string[]>([
        "ZRANGEBYSCORE",
        this.keys.sweepDue(),
        "-inf",
        String(now),
        "LIMIT",
        "0",
        String(limit),
      ]),
    );
    return due.map(Number);
  }

  /** Makes a context due by `at` at the latest (an earlier due time stands). */
  async dueBy(contextId: number, at: number): Promise<void> {
    await callRedis(() => this.redis.exec(["ZADD", this.keys.sweepDue(), "LT", String(at), String(contextId)]));
  }

  /**
   * Makes a context due within a minute (the sweep's own period), best effort: something new
   * waits there that nothing else may come for (a wake that failed, mail, a flow that never
   * started), and a failure only leaves it to whatever makes the context due later.
   */
  async dueSoon(contextId: number): Promise<void> {
    await this.dueBy(contextId, Date.now() + 60_000).catch(() => undefined);
  }

  /** Sets when a context is next due; undefined: it has nothing to look at. */
  async reschedule(contextId: number, at: number | undefined): Promise<void> {
    await callRedis(() =>
      at === undefined
        ? this.redis.exec(["ZREM", this.keys.sweepDue(), String(contextId)])
        : this.redis.exec(["ZADD", this.keys.sweepDue(), String(at), String(contextId)]),
    );
  }

  /** The flows (and jobs outside flows) of a context whose check time has come, at most `limit`. */
  async dueOwners(contextId: number, now: number, limit: number): Promise<DeadlineOwner[]> {
    const members = await callRedis(() =>
      this.redis.exec<string[]>([
        "ZRANGEBYSCORE",
        this.keys.deadlines(contextId),
        "-inf",
        String(now),
        "LIMIT",
        "0",
        String(limit),
      ]),
    );
    return members.flatMap((m) => parseDeadlineMember(String(m)) ?? []);
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

  /**
   * What a context still has for the sweep (one round trip): its earliest check, waiting mail,
   * mail in flight, the oldest of what retention removes and its policy, and whether it is being
   * deleted.
   */
  async checks(contextId: number): Promise<ContextChecks> {
    const k = this.keys;
    const replies = await callRedis(async () => {
      const p = this.redis.pipeline();
      p.zrange(k.deadlines(contextId), 0, 0, { withScores: true });
      p.llen(k.msgOut(contextId));
      p.zrange(k.inflight(contextId), 0, 0, { withScores: true });
      p.zrange(k.ended(contextId, "finished"), 0, 0, { withScores: true });
      p.zrange(k.ended(contextId, "error"), 0, 0, { withScores: true });
      p.zrange(k.inboxDue(contextId), 0, 0, { withScores: true });
      p.hget(k.context(contextId), "retention");
      p.zscore(k.contextsDeleting(), String(contextId));
      return await p.exec();
    });
    const [first, waiting, inflight, finished, error, inbox, retention, deleting] = replies as [
      string[],
      number,
      string[],
      string[],
      string[],
      string[],
      unknown,
      number | string | null,
    ];
    const score = (pair: string[]) => (pair.length === 2 ? Number(pair[1]) : undefined);
    const optional = <K extends string>(key: K, value: number | undefined) =>
      value === undefined ? {} : ({ [key]: value } as Record<K, number>);
    return {
      ...optional("firstCheck", score(first)),
      waitingMail: Number(waiting),
      ...optional("firstInFlight", score(inflight)),
      firstEnded: { ...optional("finished", score(finished)), ...optional("error", score(error)) },
      ...optional("firstInbox", score(inbox)),
      // The client may hand a JSON field back parsed: kept as the text it was stored as.
      ...(retention === null || retention === undefined
        ? {}
        : { retention: typeof retention === "string" ? retention : JSON.stringify(retention) }),
      ...optional("deletingSince", deleting === null ? undefined : Number(deleting)),
    };
  }
}
