import type { Runner } from "../../shared/model/index.js";
import { CLAIM_LIMIT, type Held, type Store, type WorkSettlement } from "../../shared/store/index.js";
import type { DeliverAnswer, Wake } from "../core/contracts.js";
import type { CoordinatorKey } from "../core/coordinator-key.js";
import type { RunnerBackoff } from "./backoff.js";
import { relayMail } from "./mail.js";

/** A claim whose delivery is owed: fresh from a claim (its queue known) or reaped (not). */
type OwedClaim = Held & { queue?: string };

/** What a round asks for: dispatch work, relay mail, reap abandoned claims. */
export type Wanted = Pick<Wake, "work" | "mail" | "reap">;

/** A claim not settled for this long is owed a delivery: its owner is asked again. */
const REAP_AFTER_MS = 30_000;
/** How often a busy dispatcher looks for abandoned claims without being asked. */
const REAP_EVERY_MS = 60_000;
/** Rounds in flight at once: a slow runner's deliveries must not hold up the others'. */
const MAX_ROUNDS = 4;
/** Owners asked to deliver at once, per round. */
const OWNER_CALLS = 64;
const MAIL_PER_ROUND = 100;
const SETTLE_TRIES = 3;

/** What the rounds need from the Dispatcher around them. */
export interface RoundsHost {
  readonly backoff: RunnerBackoff;
  store(): Store;
  contextId(): number;
  /** The context's runners (cached for a moment). */
  runners(): Promise<Runner[]>;
  signingKey(): Promise<CoordinatorKey>;
  /** Asks the owner of a work item to deliver it to `runner` (throws when the owner cannot be asked). */
  askOwner(item: string, runner: Runner): Promise<DeliverAnswer>;
  /** No round runs any more: set the alarm (to a backoff's end, or soon after a failed round). */
  rested(retrySoon: boolean): Promise<void>;
}

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
   * Push runners whose queues the last claim found empty (it left them free slots). A slot freed
   * at such a runner needs no round: nothing waits for it. Forgotten whenever work is queued.
   */
  private readonly drained = new Set<number>();
  private reapedAt = 0;
  /** Settlements that could not be written (storage away): written with the next round's. */
  private owed: WorkSettlement = { delivered: [], gone: [], back: [] };
  private rotation = 0;
  /** A round failed (storage away, an owner out of reach): the alarm tries again shortly. */
  private retrySoon = false;

  constructor(private readonly host: RoundsHost) {}

  /**
   * What a wake asks the rounds to do; undefined when it can move nothing (slots freed at
   * runners whose queues are empty, or at pull runners, which take their own work).
   */
  accept(wake: Wake, pullRunners: ReadonlySet<number>): Wanted | undefined {
    if (wake.work || wake.runners) this.drained.clear();
    const work = Boolean(
      wake.work || wake.runners || wake.freed?.some((r) => !this.drained.has(r) && !pullRunners.has(r)),
    );
    if (!work && !wake.mail && !wake.reap) return undefined;
    return { work, ...(wake.mail ? { mail: true } : {}), ...(wake.reap ? { reap: true } : {}) };
  }

  /** Wants everything looked at afresh (the alarm rang), and resolves once no round runs. */
  async everything(): Promise<void> {
    this.drained.clear();
    const idle = new Promise<void>((resolve) => this.idle.push(resolve));
    this.want({ work: true, mail: true, reap: true });
    await idle;
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
      this.running++;
      void this.round(wanted)
        .catch((error: unknown) => {
          console.warn(`dispatch in context ${this.host.contextId()}: ${(error as Error).message}`);
          this.retrySoon = true;
        })
        .finally(() => {
          this.running--;
          this.pump();
          if (this.running === 0) void this.rest();
        });
    }
  }

  /** Nothing runs: the host sets its alarm, and whoever waited for this is told. */
  private async rest(): Promise<void> {
    const retrySoon = this.retrySoon;
    this.retrySoon = false;
    try {
      await this.host.rested(retrySoon);
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
      if (moved.requeued > 0) this.want({ work: true });
      if (moved.taken >= MAIL_PER_ROUND) this.want({ mail: true });
    }
    await this.settleOwed(store);
    if (wanted.reap || Date.now() - this.reapedAt > REAP_EVERY_MS) await this.reap(store);
    if (wanted.work) await this.dispatchWork(store);
  }

  /** Claims work for push runners with free slots and not in backoff, and has it delivered. */
  private async dispatchWork(store: Store): Promise<void> {
    const waiting = await this.host.backoff.waiting();
    const push = (await this.host.runners()).filter((r) => r.address !== "" && !waiting.has(r.id));
    if (push.length === 0) return;
    // Rotate so runners with as many free slots take turns at being first.
    const start = this.rotation++ % push.length;
    const ordered = [...push.slice(start), ...push.slice(0, start)];
    const { claims, free } = await store.dispatch.claim(
      this.host.contextId(),
      ordered.map((r) => ({ id: r.id, concurrency: r.concurrency, queues: store.dispatch.queuesOf(r) })),
    );
    // A runner left with free slots took all its queues had.
    for (const [id, n] of free) {
      if (n > 0 && claims.length < CLAIM_LIMIT) this.drained.add(id);
      else this.drained.delete(id);
    }
    if (claims.length === 0) return;
    if (claims.length >= CLAIM_LIMIT) this.want({ work: true });
    const byId = new Map(push.map((r) => [r.id, r]));
    await this.deliverAll(store, claims, (c) => byId.get(c.runner));
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
    let next = 0;
    const worker = async () => {
      while (next < claims.length) {
        const claim = claims[next++] as OwedClaim;
        const held: Held = { runner: claim.runner, item: claim.item };
        const runner = runnerOf(claim);
        if (!runner) {
          // The runner was removed since: free its slot, and give the work back to its queue.
          if (claim.queue) settlement.back.push({ ...held, queue: claim.queue });
          else settlement.gone.push(held);
          continue;
        }
        this.delivering.add(claim.item);
        try {
          const answer = await this.host.askOwner(claim.item, runner);
          if (answer.outcome === "delivered") {
            settlement.delivered.push(held);
            await this.host.backoff.succeeded(runner.id);
          } else if (answer.outcome === "gone") {
            settlement.gone.push(held);
          } else {
            settlement.back.push({ ...held, queue: answer.queue });
            this.drained.clear();
            await this.host.backoff.failed(runner.id, answer.reason);
          }
        } catch (error) {
          console.warn(`dispatch: the owner of ${claim.item} could not be asked: ${(error as Error).message}`);
          this.retrySoon = true;
        } finally {
          this.delivering.delete(claim.item);
        }
      }
    };
    await Promise.all(Array.from({ length: Math.min(OWNER_CALLS, claims.length) }, worker));
    await this.settle(store, settlement);
    // Freed slots and returned work: another runner may take it now.
    if (settlement.gone.length > 0 || settlement.back.length > 0) this.want({ work: true });
  }

  /**
   * Writes how a round's claims ended, retrying a storage hiccup a few times. If storage stays
   * away, the settlement is kept and written with the next round's (the alarm brings one soon);
   * should this instance die first, the claims are unsettled in Redis and the reaper asks their
   * owners again.
   */
  private async settle(store: Store, settlement: WorkSettlement): Promise<void> {
    for (let attempt = 1; ; attempt++) {
      try {
        await store.dispatch.settle(this.host.contextId(), settlement);
        return;
      } catch (error) {
        if (attempt >= SETTLE_TRIES) {
          this.owed = {
            delivered: [...this.owed.delivered, ...settlement.delivered],
            gone: [...this.owed.gone, ...settlement.gone],
            back: [...this.owed.back, ...settlement.back],
          };
          throw error;
        }
        await new Promise((r) => setTimeout(r, 200 * 2 ** attempt));
      }
    }
  }

  /** Writes settlements earlier rounds could not. */
  private async settleOwed(store: Store): Promise<void> {
    const owed = this.owed;
    if (owed.delivered.length + owed.gone.length + owed.back.length === 0) return;
    this.owed = { delivered: [], gone: [], back: [] };
    await this.settle(store, owed);
    if (owed.back.length > 0 || owed.gone.length > 0) {
      this.drained.clear();
      this.want({ work: true });
    }
  }

  /**
   * Claims left unsettled for a while (a round that died with its isolate, a lease whose answer
   * was lost, storage away at settle time) are owed deliveries: each owner is asked again, and
   * says whether it delivered, should deliver now, or no longer wants a runner.
   */
  private async reap(store: Store): Promise<void> {
    this.reapedAt = Date.now();
    const runners = await this.host.runners();
    const ids = runners.map((r) => r.id);
    const stale = (await store.dispatch.unsettled(this.host.contextId(), ids, Date.now() - REAP_AFTER_MS)).filter(
      (c) => !this.delivering.has(c.item),
    );
    if (stale.length === 0) return;
    const byId = new Map(runners.map((r) => [r.id, r]));
    await this.deliverAll(store, stale, (c) => byId.get(c.runner));
  }
}
