import type { Runner } from "../../shared/model/index.js";
import {
  CLAIM_LIMIT,
  serves,
  type Claim,
  type ClaimRunner,
  type Held,
  type ReadyQueue,
  type Store,
  type WorkSettlement,
} from "../../shared/store/index.js";
import type { DeliverAnswer, Wake } from "../core/contracts.js";
import { DeliveredClaims } from "./delivered.js";
import { relayMail } from "./mail.js";
import type { RoundsHost, Wanted } from "./rounds-host.js";
import { Settlements } from "./settlements.js";

/** A claim whose delivery is owed: fresh from a claim (its queue known) or reaped (not). */
type OwedClaim = Held & { queue?: ReadyQueue };

/** One runner's claims, for their owners to deliver. */
interface OwnedClaims {
  runner: Runner;
  claims: OwedClaim[];
}

/** A claim not settled for this long is owed a delivery: its owner is asked again. */
const REAP_AFTER_MS = 30_000;
/** How often a busy dispatcher (one that claimed since) looks for abandoned claims without being asked. */
const REAP_EVERY_MS = 60_000;
/** Rounds in flight at once: a slow runner's deliveries must not hold up the others'. */
const MAX_ROUNDS = 4;
const MAIL_PER_ROUND = 100;

/**
 * The Dispatcher's rounds: claim what runners with free slots can take, ask each attempt's owner
 * to deliver it, settle the claims (delivered, gone, back at the front of the queue when the
 * runner refused, which then waits out a backoff), relay mail, and reap claims left unsettled.
 * Up to MAX_ROUNDS run at once. Memory here is a cache of Redis: claims are in the runners' slot
 * sets, and what is lost with the instance is found again by the reaper.
 */
export class DispatchRounds {
  private wanted: Wanted = {};
  private running = 0;
  private idle: (() => void)[] = [];
  /** Items this instance is delivering now (the reaper leaves them alone). */
  private readonly delivering = new Set<string>();
  /**
   * When this instance last reaped; its start at first: a fresh instance woken for new work does
   * not pay a reap on the way to the runner. Claims an earlier instance left unsettled are reaped
   * by the alarm that `reapAt` sets, once they are old enough.
   */
  private reapedAt = Date.now();
  /** When this instance last claimed: a periodic reap is for claims it may have left. */
  private claimedAt = 0;
  /** The claim in flight: claims go one at a time, so each sees the turns the last one moved. */
  private claiming: Promise<unknown> = Promise.resolve();
  /** Settlements written, and those that could not be (storage away), written with the next round's. */
  private readonly settlements = new Settlements(() => this.host.contextId());
  private rotation = 0;
  /** A round failed (storage away, an owner out of reach): the alarm tries again shortly. */
  private retrySoon = false;
  /**
   * When claims left unsettled become old enough to reap (epoch ms): the alarm comes then. A fresh
   * instance cannot know what an earlier one (evicted, reset mid-round) left, so its alarm comes
   * back once to look, a reap's age after its start (an earlier alarm it would otherwise move).
   */
  private reapAt: number | undefined = Date.now() + REAP_AFTER_MS;
  /** That first guess, which a sweep's look at the slot sets replaces (`looked`). */
  private readonly guessedReapAt = this.reapAt;
  /** Delivered claims not yet marked so in Redis (most never need it: see DeliveredClaims). */
  private readonly delivered = new DeliveredClaims();

  constructor(private readonly host: RoundsHost) {}

  /**
   * What a wake asks the rounds to do; undefined when it can move nothing (slots freed while no
   * queue waits). A slot freed at a pull runner counts too: under a context's or a flow's cap it
   * is room a push runner may now use.
   */
  accept(wake: Wake, queuesWait: boolean): Wanted | undefined {
    if (wake.released) this.delivered.release(wake.released);
    const freed = (wake.freed?.length ?? 0) > 0;
    const work = Boolean(wake.work || wake.runners || wake.queues?.length || (freed && queuesWait));
    if (!work && !wake.mail && !wake.reap) return undefined;
    return { work, ...(wake.mail ? { mail: true } : {}), ...(wake.reap ? { reap: true } : {}) };
  }

  /**
   * Runs rounds for what is wanted (everything by default: the alarm rang), and resolves once no
   * round runs and the alarm is set for what comes next.
   */
  async run(wanted: Wanted = { work: true, mail: true, reap: true }): Promise<void> {
    const idle = new Promise<void>((resolve) => this.idle.push(resolve));
    this.want(wanted);
    if (this.running === 0) void this.rest();
    await idle;
  }

  /**
   * A sweep looked at the slot sets of every runner this object knows: the oldest claim not yet
   * delivered there (if any) is when a reap is due, instead of a fresh instance's guess.
   */
  looked(oldestClaim: number | undefined): void {
    if (oldestClaim !== undefined) this.reapAt = Math.min(this.reapAt ?? Infinity, oldestClaim + REAP_AFTER_MS);
    else if (this.reapAt === this.guessedReapAt) this.reapAt = undefined;
  }

  /** Runs rounds for what is wanted. */
  want(wanted: Wanted): void {
    this.wanted = {
      work: Boolean(this.wanted.work || wanted.work),
      mail: Boolean(this.wanted.mail || wanted.mail),
      reap: Boolean(this.wanted.reap || wanted.reap),
    };
    this.pump();
  }

  /** Starts rounds while something is wanted and fewer than MAX_ROUNDS run. */
  private pump(): void {
    while (this.running < MAX_ROUNDS && (this.wanted.work || this.wanted.mail || this.wanted.reap)) {
      const wanted = this.wanted;
      this.wanted = {};
      void this.asRound(() => this.round(wanted)).catch(() => undefined);
    }
  }

  /**
   * Runs `work` as a round runs: counted among the rounds, a failure brings the alarm back soon,
   * and when the last one ends the alarm is set (to a backoff's end, a reap, a retry).
   */
  private async asRound(work: () => Promise<void>): Promise<void> {
    this.running++;
    try {
      await work();
    } catch (error) {
      console.warn(`dispatch in context ${this.host.contextId()}: ${(error as Error).message}`);
      this.retrySoon = true;
      throw error;
    } finally {
      this.running--;
      this.pump();
      if (this.running === 0) void this.rest();
    }
  }

  /**
   * Settles claims a flow's commit made for itself, which its object delivered to `runnerId` and
   * the runner did not take (or the object could not tell): as a round settles its owners'
   * answers (refused: back to the front of the queue, the runner backed off; gone: the slot
   * freed; not known: left for the reaper). Rejects when storage could not take it; what could not
   * be written is kept and written by the next round, which the alarm brings soon.
   */
  settleOwn(runnerId: number, items: readonly string[], answers: readonly (DeliverAnswer | Error)[]): Promise<void> {
    return this.asRound(async () => {
      const settlement: WorkSettlement = { delivered: [], gone: [], back: [] };
      await this.judge(
        runnerId,
        items.map((item) => ({ runner: runnerId, item })),
        answers,
        settlement,
      );
      await this.finish(this.host.store(), settlement);
    });
  }

  /** Nothing runs: the host sets its alarm, and whoever waited for this is told. */
  private async rest(): Promise<void> {
    const retrySoon = this.retrySoon;
    this.retrySoon = false;
    try {
      // The alarm also comes back to mark delivered claims held back long enough.
      const marks = this.delivered.nextDue();
      const at = marks === undefined ? this.reapAt : Math.min(this.reapAt ?? marks, marks);
      await this.host.rested(retrySoon, at);
    } catch (error) {
      console.warn(
        `dispatch in context ${this.host.contextId()}: setting the alarm failed: ${(error as Error).message}`,
      );
    } finally {
      for (const resolve of this.idle.splice(0)) resolve();
    }
  }

  private async round(wanted: Wanted): Promise<void> {
    const store = this.host.store();
    if (wanted.mail) {
      const moved = await relayMail(store, await this.host.signingKey(), this.host.contextId(), MAIL_PER_ROUND);
      if (moved.taken >= MAIL_PER_ROUND) this.want({ mail: true });
    }
    await this.settleOwed(store);
    const marks = this.delivered.due();
    if (marks.length > 0) await this.settlements.write(store, { delivered: marks, gone: [], back: [] });
    const periodic = this.claimedAt > this.reapedAt && Date.now() - this.reapedAt > REAP_EVERY_MS;
    if (wanted.reap || periodic) await this.reap(store);
    if (wanted.work) await this.dispatchWork(store);
  }

  /** Claims work for push runners with free slots and not in backoff, and has it delivered. */
  private async dispatchWork(store: Store): Promise<void> {
    const waiting = await this.host.backoff.waiting();
    const runners = await this.host.runners();
    const push = runners.filter((r) => r.address !== "" && !waiting.has(r.id));
    if (push.length === 0) return;
    // Rotate so runners with as many free slots take turns at being first.
    const start = this.rotation++ % push.length;
    const ordered = [...push.slice(start), ...push.slice(0, start)];
    const claims = await this.claim(store, ordered, runners, CLAIM_LIMIT);
    if (claims.length === 0) return;
    if (claims.length >= CLAIM_LIMIT) this.want({ work: true });
    const byId = new Map(push.map((r) => [r.id, r]));
    await this.deliverAll(store, claims, (c) => byId.get(c.runner));
  }

  /**
   * One claim for `takers` from the ring's queues in turn order (every other runner of the
   * context is counted, for the context's cap): the queues served go to the back of their
   * priority, those found empty leave the ring.
   */
  claim(store: Store, takers: Runner[], all: Runner[], max: number): Promise<Claim[]> {
    this.claimedAt = Date.now();
    const claimed = this.claiming.then(() => this.claimNow(store, takers, all, max));
    this.claiming = claimed.catch(() => undefined);
    return claimed;
  }

  private async claimNow(store: Store, takers: Runner[], all: Runner[], max: number): Promise<Claim[]> {
    const taking = new Set(takers.map((r) => r.id));
    const claimRunners: ClaimRunner[] = [...takers, ...all.filter((r) => !taking.has(r.id))].map((r) => ({
      id: r.id,
      concurrency: r.concurrency,
      takes: taking.has(r.id),
      serves: (queue: ReadyQueue) => serves(queue, r),
    }));
    // The queues whose turn it is: for each runner taking work, the first few times its room of
    // the queues it serves (so queues only a full runner serves cannot crowd out another's). A
    // claim stays short however many flows wait; the rest move up as these are served.
    const ordered = await this.host.ring.ordered();
    const chosen = new Set<string>();
    for (const r of takers) {
      const window = Math.min(1_000, 2 * Math.min(r.concurrency, max) + 16);
      for (const q of ordered.filter((q) => serves(q, r)).slice(0, window)) chosen.add(q.key);
    }
    const queues = ordered.filter((q) => chosen.has(q.key));
    if (queues.length === 0) return [];
    // Commits learn which flows wait before this claim takes work: one that claims its own work
    // after this either sees another flow waiting, or ran before, its slots taken or freed in
    // Redis before this claim reads them.
    await this.host.ring.mark();
    const { claims, drained } = await store.dispatch.claim(this.host.contextId(), claimRunners, queues, max);
    this.host.ring.served(new Set(claims.map((c) => c.queue.key)));
    const version = new Map(queues.map((q) => [q.key, q.version]));
    await this.host.ring.drop(drained.map((q) => ({ key: q.key, version: version.get(q.key) ?? -1 })));
    // Best effort: a mark left behind only keeps commits from claiming until the next one.
    if (drained.length > 0) await this.host.ring.mark().catch(() => undefined);
    return claims;
  }

  /**
   * Asks each claim's owner to deliver it, then settles the claims. A claim whose owner could not
   * be asked (its object unreachable) stays unsettled: the reaper asks again later.
   */
  private async deliverAll(
    store: Store,
    claims: OwedClaim[],
    runnerOf: (c: OwedClaim) => Runner | undefined,
  ): Promise<void> {
    const settlement: WorkSettlement = { delivered: [], gone: [], back: [] };
    // The claims of each runner go to their owners together: one call per flow, not per attempt.
    const byRunner = new Map<number, OwnedClaims>();
    for (const claim of claims) {
      const held: Held = { runner: claim.runner, item: claim.item };
      const runner = runnerOf(claim);
      if (!runner) {
        // The runner was removed since: free its slot, and give the work back to its queue.
        if (claim.queue) settlement.back.push({ ...held, queue: claim.queue });
        else settlement.gone.push(held);
        continue;
      }
      const group = byRunner.get(runner.id) ?? { runner, claims: [] };
      group.claims.push(claim);
      byRunner.set(runner.id, group);
    }
    await Promise.all([...byRunner.values()].map((group) => this.deliverTo(group, settlement)));
    await this.finish(store, settlement);
  }

  /** Writes a round's settlement, with the ring told of work going back to its queues. */
  private async finish(store: Store, settlement: WorkSettlement): Promise<void> {
    // Work going back to its queue: the ring must know the queue before the work is there, and
    // again after, since a claim running meanwhile may have found the queue empty and dropped it.
    const back = settlement.back.map((c) => c.queue);
    await this.host.ring.add(back);
    await this.settlements.write(store, settlement);
    await this.host.ring.add(back);
    // Freed slots and returned work: another runner may take it now.
    if (settlement.gone.length > 0 || settlement.back.length > 0) this.want({ work: true });
  }

  /** Has the owners of one runner's claims deliver them, and notes how each went in `settlement`. */
  private async deliverTo({ runner, claims }: OwnedClaims, settlement: WorkSettlement): Promise<void> {
    for (const claim of claims) this.delivering.add(claim.item);
    try {
      const answers = await this.host.askOwners(
        claims.map((c) => c.item),
        runner,
      );
      await this.judge(runner.id, claims, answers, settlement);
    } finally {
      for (const claim of claims) this.delivering.delete(claim.item);
    }
  }

  /**
   * Notes in `settlement` how each of a runner's claims went, from its owner's answer, and how the
   * runner took them, as one try: refusals in one round (the rest of a POST it could not take, or
   * several POSTs at once) back it off as one failure, not one each.
   */
  private async judge(
    runnerId: number,
    claims: readonly Held[],
    answers: readonly (DeliverAnswer | Error)[],
    settlement: WorkSettlement,
  ): Promise<void> {
    let took = false;
    let refused: string | undefined;
    for (const [i, claim] of claims.entries()) {
      const held: Held = { runner: claim.runner, item: claim.item };
      const answer = answers[i] ?? new Error("no answer");
      if (answer instanceof Error) {
        console.warn(`dispatch: the owner of ${claim.item} could not be asked: ${answer.message}`);
        this.retrySoon = true;
        // The claim stays unsettled: the reaper asks its owner again once it is old enough.
        this.reapAt = Math.min(this.reapAt ?? Number.POSITIVE_INFINITY, Date.now() + REAP_AFTER_MS);
      } else if (answer.outcome === "delivered") {
        this.delivered.add([held]);
        took = true;
      } else if (answer.outcome === "gone") {
        settlement.gone.push(held);
      } else {
        settlement.back.push({ ...held, queue: answer.queue });
        refused = answer.reason;
      }
    }
    if (took) await this.host.backoff.succeeded(runnerId);
    if (refused !== undefined) await this.host.backoff.failed(runnerId, refused);
  }

  /** Writes settlements earlier rounds could not. */
  private async settleOwed(store: Store): Promise<void> {
    const owed = this.settlements.takeOwed();
    if (!owed) return;
    await this.settlements.write(store, owed);
    // The work put back is in its queue now: named again, so no claim in between dropped it.
    await this.host.ring.add(owed.back.map((c) => c.queue));
    if (owed.back.length > 0 || owed.gone.length > 0) this.want({ work: true });
  }

  /**
   * Claims left unsettled for a while (a round that died with its isolate, a lease whose answer
   * was lost, storage away at settle time) are owed deliveries: each owner is asked again, and
   * says whether it delivered, should deliver now, or no longer wants a runner.
   */
  private async reap(store: Store): Promise<void> {
    const now = Date.now();
    this.reapedAt = now;
    const runners = await this.host.runners();
    const ids = runners.map((r) => r.id);
    const unsettled = (await store.dispatch.unsettled(this.host.contextId(), ids)).filter(
      (c) => !this.delivering.has(c.item) && !this.delivered.has(c.item),
    );
    const stale = unsettled.filter((c) => c.claimedAt <= now - REAP_AFTER_MS);
    // Claims too young to reap yet are reaped when they are old enough: nothing else may come
    // to wake this object (the flows they belong to wait for exactly these claims).
    const young = unsettled.filter((c) => c.claimedAt > now - REAP_AFTER_MS);
    this.reapAt = young.length > 0 ? Math.min(...young.map((c) => c.claimedAt)) + REAP_AFTER_MS : undefined;
    if (stale.length === 0) return;
    const byId = new Map(runners.map((r) => [r.id, r]));
    await this.deliverAll(store, stale, (c) => byId.get(c.runner));
  }
}
