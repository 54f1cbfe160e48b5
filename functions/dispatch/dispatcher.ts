import { DurableObject } from "cloudflare:workers";
import type { Runner } from "../../shared/model/index.js";
import { pushRunnersOf, type Claim, type Store } from "../../shared/store/index.js";
import type { DispatcherRpc, OwnerAnswer, WaitReason, Wake, Want } from "../core/contracts.js";
import { coordinatorKeys } from "../core/coordinator-key.js";
import type { Env } from "../core/env.js";
import type { DispatchScope } from "../core/scopes.js";
import { bindScope, storeForPrefix } from "../core/store.js";
import { askOwners } from "../core/stubs.js";
import { RunnerBackoff } from "./backoff.js";
import { sweepContext, type SweepHost } from "./context-sweep.js";
import { explainWait } from "./explain.js";
import { ReadyRing } from "./ring.js";
import { RunnerList } from "./runner-list.js";
import { DispatchRounds } from "./rounds.js";

/** A wake's alarm: should this isolate die mid-round, the round runs again then. */
const SAFETY_MS = 30_000;
/** How soon the alarm rings again after a round failed. */
const RETRY_SOON_MS = 5_000;
/** The sweep the cron asked for and that is not done yet: when it was asked (epoch ms). */
const SWEEP_KEY = "sweep";

/**
 * Dispatcher: one per context, the one that keeps the context's ready work moving. Attempts wait
 * in Redis (one queue per flow and script type); which queues wait, and whose turn it is, is its
 * ring (ReadyRing, durable here). A runner's concurrency is its slot set in Redis, claimed in the
 * same step that takes the work, so the limit holds across every isolate. Its rounds
 * (DispatchRounds) claim, have owners deliver, and settle; runner backoff is kept durably here
 * (RunnerBackoff). Pull runners lease through it too, so they take their turns in the same order.
 *
 * It is woken when work is queued or slots are freed (by the commit that did it, which waits
 * for the wake to be durable), when messages for actors are posted, and when runners change. Its
 * alarm is the safety net: set before a round starts, so a round lost with its isolate runs
 * again, and set to the end of a runner's backoff while work waits for it. It also runs its
 * context's sweep when the cron asks (`sweep`), on the same alarm (context-sweep.ts). While
 * nothing can move, it costs nothing.
 */
export class Dispatcher extends DurableObject<Env> implements DispatcherRpc {
  private scope: DispatchScope | undefined;
  private readonly runnerList = new RunnerList(
    this.ctx.storage,
    async () => (await this.store().runners.list({ context_id: this.bound().contextId }, 0, 1000)).items,
    async (list) => {
      await this.backoff.keepOnly(new Set(list.map((r) => r.id)));
      // Named for the claims of commits whose objects have not delivered to them yet (a cold
      // isolate's): read with each submission's reservation. Best effort: without the names,
      // such a flow's work comes through this object, as it always may.
      await this.store()
        .dispatch.namePushRunners(this.bound().contextId, pushRunnersOf(list))
        .catch(() => undefined);
    },
  );
  /** When the alarm rings (null: none), once read; undefined until then, or when unsure. */
  private alarmAt: number | null | undefined;
  /** When the sweep not done yet was asked (null: none), once read; true while it runs. */
  private sweepAsked: number | null | undefined;
  private sweeping = false;
  private readonly backoff = new RunnerBackoff(
    this.ctx.storage,
    () => this.store(),
    () => this.bound().contextId,
  );
  private readonly ring = new ReadyRing(this.ctx.storage, (value) =>
    this.store().dispatch.markWaiting(this.bound().contextId, value),
  );
  private readonly rounds = new DispatchRounds({
    backoff: this.backoff,
    ring: this.ring,
    store: () => this.store(),
    contextId: () => this.bound().contextId,
    runners: () => this.runners(),
    signingKey: async () => (await coordinatorKeys(this.env)).current,
    askOwners: (items, runner) =>
      askOwners(this.env, this.bound(), items, {
        id: runner.id,
        address: runner.address,
        perPost: runner.deliveries_per_post,
        pubkey: runner.pubkey,
        scriptTypes: runner.script_types,
      }),
    rested: (retrySoon, reapAt) => this.rested(retrySoon, reapAt),
  });

  async wake(scope: DispatchScope, wake: Wake): Promise<void> {
    await this.bind(scope);
    if (wake.runners) await this.runnerList.drop();
    if (wake.queues?.length) {
      // Durable before the wake is answered: the queues are what the ring must not lose. And
      // commits learn which flows wait here before the wake is answered (rounds mark before
      // they claim, too).
      await this.ring.add(wake.queues);
      await this.ring.mark();
    }
    const wanted = this.rounds.accept(wake, (await this.ring.keys()).length > 0);
    if (!wanted) return;
    const safety = Date.now() + SAFETY_MS;
    // The alarm's time is kept in memory once read: a busy context wakes its dispatcher often.
    this.alarmAt ??= await this.ctx.storage.getAlarm();
    if (this.alarmAt === null || this.alarmAt > safety) {
      await this.ctx.storage.setAlarm(safety);
      this.alarmAt = safety;
    }
    this.rounds.want(wanted);
  }

  async explain(scope: DispatchScope, wants: Want[]): Promise<WaitReason[]> {
    await this.bind(scope);
    return explainWait(this.store(), scope.contextId, await this.runners(), await this.backoff.waiting(), wants);
  }

  async waiting(scope: DispatchScope): Promise<number> {
    await this.bind(scope);
    return this.store().dispatch.waiting(await this.ring.keys());
  }

  async lease(scope: DispatchScope, runnerId: number, max: number): Promise<Claim[]> {
    await this.bind(scope);
    let runners = await this.runners();
    if (!runners.some((r) => r.id === runnerId)) {
      await this.runnerList.drop(); // registered a moment ago
      runners = await this.runners();
    }
    const runner = runners.find((r) => r.id === runnerId);
    if (!runner) return [];
    return this.rounds.claim(this.store(), [runner], runners, max);
  }

  async settleOwn(scope: DispatchScope, runnerId: number, items: string[], answers: OwnerAnswer[]): Promise<void> {
    await this.bind(scope);
    await this.rounds.settleOwn(
      runnerId,
      items,
      answers.map((a) => (a.outcome === "failed" ? new Error(a.reason) : a)),
    );
  }

  /**
   * The cron asks for the context's sweep: kept in storage and run on the alarm, at once, so the
   * cron's call returns here and a sweep that fails is run again by the alarm's retries.
   */
  async sweep(scope: DispatchScope): Promise<void> {
    await this.bind(scope);
    const asked = Date.now();
    await this.ctx.storage.put(SWEEP_KEY, asked);
    this.sweepAsked = asked;
    this.alarmAt ??= await this.ctx.storage.getAlarm();
    if (this.alarmAt === null || this.alarmAt > asked) {
      await this.ctx.storage.setAlarm(asked);
      this.alarmAt = asked;
    }
  }

  /**
   * Forgets the context, which is being deleted: the alarm and every stored key go, and the
   * scope, so nothing runs here until a call binds it again. (Ring entries this instance still
   * holds in memory name queues that are gone: a round finds them empty and drops them.)
   */
  async purge(): Promise<void> {
    await this.ctx.storage.deleteAlarm();
    await this.ctx.storage.deleteAll();
    this.scope = undefined;
    this.alarmAt = null;
    this.sweepAsked = null;
  }

  override async alarm(): Promise<void> {
    this.alarmAt = null; // it rang
    this.scope ??= await this.ctx.storage.get<DispatchScope>("scope");
    if (!this.scope) return;
    const asked = await this.ctx.storage.get<number>(SWEEP_KEY);
    if (asked !== undefined) return this.sweepNow(asked);
    await this.rounds.run();
    await this.watchMailInFlight();
  }

  /**
   * Runs the context's sweep, then the rounds it calls for (and no others: the sweep looked at
   * what they would look for). A sweep asked again meanwhile keeps its key, and its alarm.
   */
  private async sweepNow(asked: number): Promise<void> {
    this.sweeping = true;
    let outcome;
    try {
      outcome = await sweepContext(this.sweepHost(), Date.now());
    } catch (error) {
      this.alarmAt = undefined; // the runtime retries the alarm
      throw error;
    } finally {
      this.sweeping = false;
    }
    if (outcome.deleted) return; // the storage and the alarm went with the context
    if ((await this.ctx.storage.get<number>(SWEEP_KEY)) === asked) {
      await this.ctx.storage.delete(SWEEP_KEY);
      this.sweepAsked = null;
    }
    if (outcome.claims) this.rounds.looked(outcome.claims.oldest);
    await this.rounds.run(outcome.wanted);
    await this.watchMailInFlight(outcome);
  }

  private sweepHost(): SweepHost {
    return {
      env: this.env,
      scope: this.bound(),
      store: this.store(),
      storage: this.ctx.storage,
      knownRunners: () => this.runnerList.known(),
      ringWaits: async () => (await this.ring.keys()).length > 0,
      dropRunners: () => this.runnerList.drop(),
      purge: () => this.purge(),
    };
  }

  /**
   * No round runs: the alarm goes to when a runner in backoff may be tried, soon after a failure,
   * when claims left unsettled may be reaped, or away.
   */
  private async rested(retrySoon: boolean, reapAt: number | undefined): Promise<void> {
    const retries = [...(await this.backoff.waiting()).values()].map((h) => h.retry_at);
    if (retrySoon) retries.push(Date.now() + RETRY_SOON_MS);
    if (reapAt !== undefined) retries.push(reapAt);
    // A sweep asked for and not running yet keeps its alarm.
    this.sweepAsked ??= (await this.ctx.storage.get<number>(SWEEP_KEY)) ?? null;
    if (this.sweepAsked !== null && !this.sweeping) retries.push(Date.now());
    const at = retries.length > 0 ? Math.min(...retries) : null;
    this.alarmAt = undefined; // unsure until the write below went through
    if (at !== null) await this.ctx.storage.setAlarm(at);
    else await this.ctx.storage.deleteAlarm();
    this.alarmAt = at;
  }

  /**
   * Messages for actors that a relay took and never settled (its isolate died, or storage went
   * away mid-relay) go back to msg_out once their settle time passed, when msg_out is next
   * relayed. So that this happens even if nothing else wakes the dispatcher, its alarm (which
   * runs rarely: a safety net, a backoff's end) looks at the oldest one and comes back then
   * (`seen`: a sweep's look read it already).
   */
  private async watchMailInFlight(seen?: { firstInFlight?: number }): Promise<void> {
    const due = seen
      ? seen.firstInFlight
      : await this.store()
          .flows.firstInFlight(this.bound().contextId)
          .catch(() => Date.now() + RETRY_SOON_MS);
    if (due === undefined) return;
    const at = Math.max(due + 1_000, Date.now() + 1_000);
    if (this.alarmAt === null || this.alarmAt === undefined || this.alarmAt > at) {
      this.alarmAt = at;
      await this.ctx.storage.setAlarm(at);
    }
  }

  /** The context's runners (see RunnerList). */
  private runners(): Promise<Runner[]> {
    return this.runnerList.get();
  }

  private async bind(scope: DispatchScope): Promise<void> {
    this.scope ??= await bindScope(this.ctx.storage, scope);
  }

  private bound(): DispatchScope {
    if (!this.scope) throw new Error("the Dispatcher was used before it was bound to a context");
    return this.scope;
  }

  private store(): Store {
    return storeForPrefix(this.env, this.bound().prefix);
  }
}
