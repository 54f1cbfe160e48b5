import type { Runner } from "../../shared/model/index.js";
import { pushRunnersOf, type Store } from "../../shared/store/index.js";
import type { DeliverAnswer, Wake } from "../core/contracts.js";
import { coordinatorKeys, type CoordinatorKey } from "../core/coordinator-key.js";
import type { Env } from "../core/env.js";
import type { DispatchScope } from "../core/scopes.js";
import { bindScope, storeForPrefix } from "../core/store.js";
import { askOwners } from "../core/stubs.js";
import { RunnerBackoff, type BackoffHost } from "./backoff.js";
import { sweepContext, type SweepHost } from "./context-sweep.js";
import { ReadyRing, type RingHost } from "./ring.js";
import { RunnerList, type RunnerListHost } from "./runner-list.js";
import type { RoundsHost } from "./rounds-host.js";
import { DispatchRounds } from "./rounds.js";

/** A wake's alarm: should this isolate die mid-round, the round runs again then. */
const SAFETY_MS = 30_000;
/** How soon the alarm rings again after a round failed. */
const RETRY_SOON_MS = 5_000;
/** The sweep the cron asked for and that is not done yet: when it was asked (epoch ms). */
const SWEEP_KEY = "sweep";

/**
 * One context's Dispatcher object, composed: its parts, built in the order below, and the steps
 * of the paths that move work. Every part reaches another only through this class, which
 * implements what each part asks (its `…Host` interface) with methods named after it:
 *
 *   a commit's wake → wake: the queues into the ring (durable, marked) → the alarm's safety time
 *     → rounds.want: claim (claimWork), have owners deliver, settle (settleWork)
 *     → rested: the alarm to a backoff's end, a retry, or a reap
 *   the cron's hand-over → sweep: kept, the alarm at once → alarm → sweepNow: the context's
 *     sweep (context-sweep.ts: look, pokes, retention or deletion, settle) → the rounds it calls for
 *
 * The parts: `runnerList` (the context's runners, kept a while), `backoff` (runners whose
 * deliveries fail), `ring` (which flows' queues wait, in turn order) and `rounds` (claim, deliver,
 * settle, relay mail, reap).
 */
export class DispatchObject implements RoundsHost, SweepHost, BackoffHost, RingHost, RunnerListHost {
  readonly storage: DurableObjectStorage;
  readonly runnerList: RunnerList;
  readonly backoff: RunnerBackoff;
  readonly ring: ReadyRing;
  readonly rounds: DispatchRounds;
  private bound: DispatchScope | undefined;
  /** When the alarm rings (null: none), once read; undefined until then, or when unsure. */
  private alarmAt: number | null | undefined;
  /** When the sweep not done yet was asked (null: none), once read. */
  private sweepAsked: number | null | undefined;
  private sweeping = false;

  constructor(
    ctx: DurableObjectState,
    readonly env: Env,
  ) {
    this.storage = ctx.storage;
    this.runnerList = new RunnerList(ctx.storage, this);
    this.backoff = new RunnerBackoff(ctx.storage, this);
    this.ring = new ReadyRing(ctx.storage, this);
    this.rounds = new DispatchRounds(this);
  }

  // The paths that move work.

  /** A commit (or a route) names work, mail or runners that changed: a round is wanted. */
  async wake(wake: Wake): Promise<void> {
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
    await this.alarmBy(Date.now() + SAFETY_MS);
    this.rounds.want(wanted);
  }

  /**
   * The cron asks for the context's sweep: kept in storage and run on the alarm, at once, so the
   * cron's call returns here and a sweep that fails is run again by the alarm's retries.
   */
  async sweep(): Promise<void> {
    const asked = Date.now();
    await this.storage.put(SWEEP_KEY, asked);
    this.sweepAsked = asked;
    await this.alarmBy(asked);
  }

  /** The alarm rang: a sweep asked for, else the rounds (a round lost with its isolate, a backoff's end). */
  async alarm(): Promise<void> {
    this.alarmAt = null; // it rang
    this.bound ??= await this.storage.get<DispatchScope>("scope");
    if (!this.bound) return;
    const asked = await this.storage.get<number>(SWEEP_KEY);
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
      outcome = await sweepContext(this, Date.now());
    } catch (error) {
      this.alarmAt = undefined; // the runtime retries the alarm
      throw error;
    } finally {
      this.sweeping = false;
    }
    if (outcome.deleted) return; // the storage and the alarm went with the context
    if ((await this.storage.get<number>(SWEEP_KEY)) === asked) {
      await this.storage.delete(SWEEP_KEY);
      this.sweepAsked = null;
    }
    if (outcome.claims) this.rounds.looked(outcome.claims.oldest);
    await this.rounds.run(outcome.wanted);
    await this.watchMailInFlight(outcome);
  }

  /** Sets the alarm to `at` unless it rings sooner (its time kept in memory once read). */
  private async alarmBy(at: number): Promise<void> {
    this.alarmAt ??= await this.storage.getAlarm();
    if (this.alarmAt === null || this.alarmAt > at) {
      await this.storage.setAlarm(at);
      this.alarmAt = at;
    }
  }

  /**
   * No round runs (RoundsHost): the alarm goes to when a runner in backoff may be tried, soon
   * after a failure, when claims left unsettled may be reaped, or away.
   */
  async rested(retrySoon: boolean, reapAt: number | undefined): Promise<void> {
    const retries = [...(await this.backoff.waiting()).values()].map((h) => h.retry_at);
    if (retrySoon) retries.push(Date.now() + RETRY_SOON_MS);
    if (reapAt !== undefined) retries.push(reapAt);
    // A sweep asked for and not running yet keeps its alarm.
    this.sweepAsked ??= (await this.storage.get<number>(SWEEP_KEY)) ?? null;
    if (this.sweepAsked !== null && !this.sweeping) retries.push(Date.now());
    const at = retries.length > 0 ? Math.min(...retries) : null;
    this.alarmAt = undefined; // unsure until the write below went through
    if (at !== null) await this.storage.setAlarm(at);
    else await this.storage.deleteAlarm();
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
          .flows.firstInFlight(this.scope().contextId)
          .catch(() => Date.now() + RETRY_SOON_MS);
    if (due === undefined) return;
    const at = Math.max(due + 1_000, Date.now() + 1_000);
    if (this.alarmAt === null || this.alarmAt === undefined || this.alarmAt > at) {
      this.alarmAt = at;
      await this.storage.setAlarm(at);
    }
  }

  /**
   * Forgets the context, which is being deleted (SweepHost): the alarm and every stored key go,
   * and the scope, so nothing runs here until a call binds it again. (Ring entries this instance
   * still holds in memory name queues that are gone: a round finds them empty and drops them.)
   */
  async purge(): Promise<void> {
    await this.storage.deleteAlarm();
    await this.storage.deleteAll();
    this.bound = undefined;
    this.alarmAt = null;
    this.sweepAsked = null;
  }

  // What the parts ask of the object.

  contextId(): number {
    return this.scope().contextId;
  }

  /** The context's runners (see RunnerList). */
  runners(): Promise<Runner[]> {
    return this.runnerList.get();
  }

  knownRunners(): Promise<Runner[] | undefined> {
    return this.runnerList.known();
  }

  async loadRunners(): Promise<Runner[]> {
    return (await this.store().runners.list({ context_id: this.contextId() }, 0, 1000)).items;
  }

  /**
   * A runner list loaded: the backoff forgets runners that are gone, and the push runners are
   * named for the claims of commits whose objects have not delivered to them yet (a cold
   * isolate's): read with each submission's reservation. Best effort: without the names, such a
   * flow's work comes through this object, as it always may.
   */
  async runnersLoaded(list: Runner[]): Promise<void> {
    await this.backoff.keepOnly(new Set(list.map((r) => r.id)));
    await this.store()
      .dispatch.namePushRunners(this.contextId(), pushRunnersOf(list))
      .catch(() => undefined);
  }

  dropRunners(): Promise<void> {
    return this.runnerList.drop();
  }

  async ringWaits(): Promise<boolean> {
    return (await this.ring.keys()).length > 0;
  }

  markWaiting(value: string): Promise<void> {
    return this.store().dispatch.markWaiting(this.contextId(), value);
  }

  async signingKey(): Promise<CoordinatorKey> {
    return (await coordinatorKeys(this.env)).current;
  }

  askOwners(items: string[], runner: Runner): Promise<(DeliverAnswer | Error)[]> {
    return askOwners(this.env, this.scope(), items, {
      id: runner.id,
      address: runner.address,
      perPost: runner.deliveries_per_post,
      pubkey: runner.pubkey,
      scriptTypes: runner.script_types,
    });
  }

  /** Binds the object to its context (kept in storage by the first call). */
  async bind(scope: DispatchScope): Promise<void> {
    this.bound ??= await bindScope(this.storage, scope);
  }

  scope(): DispatchScope {
    if (!this.bound) throw new Error("the Dispatcher was used before it was bound to a context");
    return this.bound;
  }

  store(): Store {
    return storeForPrefix(this.env, this.scope().prefix);
  }
}
