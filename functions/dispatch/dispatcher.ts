import { DurableObject } from "cloudflare:workers";
import type { Runner } from "../../shared/model/index.js";
import { CLAIM_LIMIT, type Claim, type Store, type WorkSettlement } from "../../shared/store/index.js";
import type { DeliverAnswer, DispatcherRpc, WaitReason, Wake, Want } from "../core/contracts.js";
import { coordinatorKeys } from "../core/coordinator-key.js";
import type { Env } from "../core/env.js";
import { Problem, unwrap } from "../core/problem.js";
import { scopeFor, workItemOwner, type DispatchScope } from "../core/scopes.js";
import { bindScope, storeForPrefix } from "../core/store.js";
import { coordinatorStub } from "../core/stubs.js";
import { RunnerBackoff } from "./backoff.js";
import { explainWait } from "./explain.js";
import { relayMail } from "./mail.js";

/** A claim whose delivery is owed: fresh from a claim (its queue known) or reaped (not). */
type OwedClaim = Omit<Claim, "queue"> & { queue?: string };

/** A wake's alarm: should this isolate die mid-round, the round runs again then. */
const SAFETY_MS = 30_000;
/** A claim not settled for this long is owed a delivery: its owner is asked again. */
const REAP_AFTER_MS = 30_000;
/** How often a busy dispatcher looks for abandoned claims without being asked. */
const REAP_EVERY_MS = 60_000;
const RUNNER_CACHE_MS = 2_000;
/** Rounds in flight at once: a slow runner's deliveries must not hold up the others'. */
const MAX_ROUNDS = 4;
/** Owners asked to deliver at once, per round. */
const OWNER_CALLS = 64;
const MAIL_PER_ROUND = 100;
const SETTLE_TRIES = 3;

/**
 * Dispatcher: one per context, the one that keeps the context's ready work moving. Attempts wait
 * in Redis (the ready queues); a runner's concurrency is its slot set in Redis, claimed in the
 * same step that takes the work, so the limit holds across every isolate. A round claims what
 * runners with free slots can take, asks each attempt's FlowCoordinator to deliver it (it records
 * the assignment and POSTs), then settles the claims: delivered, gone, or back at the front of
 * the queue when the runner refused (the runner then waits out a backoff, kept durably here).
 *
 * It is woken when work is queued or slots are freed (by the commit that did it, which waits
 * for the wake to be durable), when messages for actors are posted, when runners change, and by
 * the supervisor's sweep. Its alarm is the safety net: set before a round starts, so a round lost
 * with its isolate runs again, and set to the end of a runner's backoff while work waits for it.
 * While nothing can move, it costs nothing.
 */
export class Dispatcher extends DurableObject<Env> implements DispatcherRpc {
  private scope: DispatchScope | undefined;
  private wanted: Wake = {};
  private rounds = 0;
  private idle: (() => void)[] = [];
  private runnerCache: { at: number; list: Runner[] } | undefined;
  /** Items this instance is delivering now (the reaper leaves them alone). */
  private readonly delivering = new Set<string>();
  /**
   * Push runners whose queues the last claim found empty (it left them free slots). A slot freed
   * at such a runner needs no round: nothing waits for it. Forgotten whenever work is queued.
   */
  private readonly drained = new Set<number>();
  private reapedAt = 0;
  /** When the alarm rings (null: none), once read; undefined until then. */
  private alarmAt: number | null | undefined;
  /** Settlements that could not be written (storage away): written with the next round's. */
  private owedSettlement: WorkSettlement = { delivered: [], gone: [], back: [] };
  private rotation = 0;
  private readonly backoff = new RunnerBackoff(
    this.ctx.storage,
    () => this.store(),
    () => (this.scope as DispatchScope).contextId,
  );

  /** Wakes the dispatcher: durable once this resolves; the round runs after it. */
  async wake(scope: DispatchScope, wake: Wake): Promise<void> {
    await this.bind(scope);
    if (wake.runners) this.runnerCache = undefined;
    if (wake.work || wake.runners) this.drained.clear();
    const pull = new Set((this.runnerCache?.list ?? []).filter((r) => r.address === "").map((r) => r.id));
    const work = Boolean(wake.work || wake.runners || wake.freed?.some((r) => !this.drained.has(r) && !pull.has(r)));
    if (!work && !wake.mail && !wake.reap) return; // slots freed where nothing waits
    const safety = Date.now() + SAFETY_MS;
    // The alarm's time is kept in memory once read: a busy context wakes its dispatcher often.
    this.alarmAt ??= await this.ctx.storage.getAlarm();
    if (this.alarmAt === null || this.alarmAt > safety) {
      await this.ctx.storage.setAlarm(safety);
      this.alarmAt = safety;
    }
    this.want({ work, ...(wake.mail ? { mail: true } : {}), ...(wake.reap ? { reap: true } : {}) });
  }

  /** Why attempts of these kinds are not with a runner yet (one reason per want). */
  async explain(scope: DispatchScope, wants: Want[]): Promise<WaitReason[]> {
    await this.bind(scope);
    return explainWait(this.store(), scope.contextId, await this.runners(), await this.backoff.waiting(), wants);
  }

  override async alarm(): Promise<void> {
    this.alarmAt = null; // it rang
    this.scope ??= await this.ctx.storage.get<DispatchScope>("scope");
    if (!this.scope) return;
    this.drained.clear();
    this.want({ work: true, mail: true, reap: true });
    await new Promise<void>((resolve) => this.idle.push(resolve));
    await this.watchMailInFlight();
  }

  /**
   * Messages for actors that a relay took and never settled (its isolate died, or storage went
   * away mid-relay) go back to msg_out once their settle time passed, when msg_out is next
   * relayed. So that this happens even if nothing else wakes the dispatcher, its alarm (which
   * runs rarely: a safety net, a backoff's end) looks at the oldest one and comes back then.
   */
  private async watchMailInFlight(): Promise<void> {
    const { contextId } = this.scope as DispatchScope;
    const due = await this.store()
      .flows.firstInFlight(contextId)
      .catch(() => Date.now() + 5_000);
    if (due === undefined) return;
    const at = Math.max(due + 1_000, Date.now() + 1_000);
    if (this.alarmAt === null || this.alarmAt === undefined || this.alarmAt > at) {
      this.alarmAt = at;
      await this.ctx.storage.setAlarm(at);
    }
  }

  private async bind(scope: DispatchScope): Promise<void> {
    this.scope ??= await bindScope(this.ctx.storage, scope);
  }

  private store(): Store {
    return storeForPrefix(this.env, (this.scope as DispatchScope).prefix);
  }

  private want(wake: Pick<Wake, "work" | "mail" | "reap">): void {
    this.wanted = {
      work: Boolean(this.wanted.work || wake.work),
      mail: Boolean(this.wanted.mail || wake.mail),
      reap: Boolean(this.wanted.reap || wake.reap),
    };
    this.pump();
  }

  /** Starts rounds while something is wanted and fewer than MAX_ROUNDS run. */
  private pump(): void {
    while (this.rounds < MAX_ROUNDS && (this.wanted.work || this.wanted.mail || this.wanted.reap)) {
      const wanted = this.wanted;
      this.wanted = {};
      this.rounds++;
      void this.round(wanted)
        .catch((error: unknown) => {
          console.warn(`dispatch in context ${this.scope?.contextId}: ${(error as Error).message}`);
          this.retrySoon = true;
        })
        .finally(() => {
          this.rounds--;
          this.pump();
          if (this.rounds === 0) void this.rest();
        });
    }
  }

  /** A round failed (storage away): the alarm tries again shortly. */
  private retrySoon = false;

  /** Nothing runs: the alarm goes to when a runner in backoff may be tried, or away. */
  private async rest(): Promise<void> {
    try {
      const retries = [...(await this.backoff.waiting()).values()].map((h) => h.retry_at);
      if (this.retrySoon) retries.push(Date.now() + 5_000);
      this.retrySoon = false;
      this.alarmAt = retries.length > 0 ? Math.min(...retries) : null;
      if (this.alarmAt !== null) await this.ctx.storage.setAlarm(this.alarmAt);
      else await this.ctx.storage.deleteAlarm();
    } finally {
      for (const resolve of this.idle.splice(0)) resolve();
    }
  }

  private async round(wanted: Wake): Promise<void> {
    const store = this.store();
    const { contextId } = this.scope as DispatchScope;
    if (wanted.mail) {
      const moved = await relayMail(store, (await coordinatorKeys(this.env)).current, contextId, MAIL_PER_ROUND);
      if (moved.requeued > 0) this.want({ work: true });
      if (moved.taken >= MAIL_PER_ROUND) this.want({ mail: true });
    }
    await this.settleOwed(store);
    if (wanted.reap || Date.now() - this.reapedAt > REAP_EVERY_MS) await this.reap(store);
    if (wanted.work) await this.dispatchWork(store);
  }

  /** The context's runners, looked up at most every few seconds. */
  private async runners(): Promise<Runner[]> {
    const now = Date.now();
    if (!this.runnerCache || now - this.runnerCache.at > RUNNER_CACHE_MS) {
      const { contextId } = this.scope as DispatchScope;
      const list = (await this.store().runners.list({ context_id: contextId }, 0, 1000)).items;
      this.runnerCache = { at: now, list };
      await this.backoff.keepOnly(new Set(list.map((r) => r.id)));
    }
    return this.runnerCache.list;
  }

  /** Claims work for push runners with free slots and not in backoff, and has it delivered. */
  private async dispatchWork(store: Store): Promise<void> {
    const { contextId } = this.scope as DispatchScope;
    const waiting = await this.backoff.waiting();
    const push = (await this.runners()).filter((r) => r.address !== "" && !waiting.has(r.id));
    if (push.length === 0) return;
    // Rotate so runners with as many free slots take turns at being first.
    const start = this.rotation++ % push.length;
    const ordered = [...push.slice(start), ...push.slice(0, start)];
    const { claims, free } = await store.dispatch.claim(
      contextId,
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
        const runner = runnerOf(claim);
        if (!runner) {
          // The runner was removed since: free its slot, and give the work back to its queue.
          if (claim.queue) settlement.back.push({ ...claim, queue: claim.queue });
          else settlement.gone.push({ ...claim, queue: "" });
          continue;
        }
        this.delivering.add(claim.item);
        try {
          const answer = await this.askOwner(claim.item, runner);
          if (answer.outcome === "delivered") {
            settlement.delivered.push({ ...claim, queue: "" });
            await this.backoff.succeeded(runner.id);
          } else if (answer.outcome === "gone") {
            settlement.gone.push({ ...claim, queue: "" });
          } else {
            settlement.back.push({ ...claim, queue: answer.queue });
            this.drained.clear();
            await this.backoff.failed(runner.id, answer.reason);
          }
        } catch (error) {
          if (error instanceof Problem && error.status === 404) {
            settlement.gone.push({ ...claim, queue: "" }); // its flow no longer exists
          } else {
            console.warn(`dispatch: the owner of ${claim.item} could not be asked: ${(error as Error).message}`);
            this.retrySoon = true;
          }
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
    const { contextId } = this.scope as DispatchScope;
    for (let attempt = 1; ; attempt++) {
      try {
        await store.dispatch.settle(contextId, settlement);
        return;
      } catch (error) {
        if (attempt >= SETTLE_TRIES) {
          const owed = this.owedSettlement;
          this.owedSettlement = {
            delivered: [...owed.delivered, ...settlement.delivered],
            gone: [...owed.gone, ...settlement.gone],
            back: [...owed.back, ...settlement.back],
          };
          throw error;
        }
        await new Promise((r) => setTimeout(r, 200 * 2 ** attempt));
      }
    }
  }

  /** Writes settlements earlier rounds could not. */
  private async settleOwed(store: Store): Promise<void> {
    const owed = this.owedSettlement;
    if (owed.delivered.length + owed.gone.length + owed.back.length === 0) return;
    this.owedSettlement = { delivered: [], gone: [], back: [] };
    await this.settle(store, owed);
    if (owed.back.length > 0 || owed.gone.length > 0) {
      this.drained.clear();
      this.want({ work: true });
    }
  }

  /** Asks the FlowCoordinator that owns a work item to deliver it to `runner`. */
  private async askOwner(item: string, runner: Runner): Promise<DeliverAnswer> {
    const scope = this.scope as DispatchScope;
    const target = workItemOwner(item);
    if (!target) return { outcome: "gone", reason: `not a work item: ${item}` };
    const owner = scopeFor(scope, scope.contextId, target);
    return unwrap(
      await coordinatorStub(this.env, owner).deliver(owner, item, { id: runner.id, address: runner.address }),
    );
  }

  /**
   * Claims left unsettled for a while (a round that died with its isolate, a lease whose answer
   * was lost, storage away at settle time) are owed deliveries: each owner is asked again, and
   * says whether it delivered, should deliver now, or no longer wants a runner.
   */
  private async reap(store: Store): Promise<void> {
    const { contextId } = this.scope as DispatchScope;
    this.reapedAt = Date.now();
    const runners = await this.runners();
    const stale = (
      await store.dispatch.unsettled(
        contextId,
        runners.map((r) => r.id),
        Date.now() - REAP_AFTER_MS,
      )
    ).filter((c) => !this.delivering.has(c.item));
    if (stale.length === 0) return;
    const byId = new Map(runners.map((r) => [r.id, r]));
    await this.deliverAll(store, stale, (c) => byId.get(c.runner));
  }
}
