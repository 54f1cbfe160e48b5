import type { FlowEvent, FlowState, Journal } from "../../shared/flow/index.js";
import type { CommitOutcome, CommitPlan, CommitStep, Store } from "../../shared/store/index.js";
import type { DeliveryTarget, OwnerAnswer } from "../core/contracts.js";
import { readDeliveryTimeoutMs } from "../core/config.js";
import { coordinatorKeys } from "../core/coordinator-key.js";
import type { Env } from "../core/env.js";
import { Problem } from "../core/problem.js";
import { dispatchScopeOf, scopeName, type FlowScope } from "../core/scopes.js";
import { storeForPrefix } from "../core/store.js";
import { settleOwnClaims } from "../core/stubs.js";
import type { FlowChange } from "../../shared/flow/changes.js";
import { OutgoingMessages, type AttemptOwner } from "./attempt-delivery.js";
import { FlowBinding } from "./binding.js";
import { ChildFlows, type ChildrenHost } from "./children.js";
import type { CreationHost } from "./creation.js";
import { Deadlines, type DeadlineHost } from "./deadlines.js";
import { FlowEffects, type EffectsHost } from "./effects.js";
import { FeedRelay } from "./feed-relay.js";
import { GroupCommit, type CommitHost, type Committed } from "./group-commit.js";
import { Growth, type GrowthHost } from "./growth.js";
import { Incarnations, type Forgetful, type IncarnationHost } from "./incarnation.js";
import { KeptEvents, type KeptEventsHost } from "./kept-events.js";
import { NonceLedger } from "./nonces.js";
import { OwedReports, type OwedReportsHost } from "./owed-reports.js";
import { assignmentsOf, awaitsRunners, CLAIM_SAFETY_MS, OwnClaims, type OwnClaimsHost } from "./own-claims.js";
import type { PendingCommit } from "./pending.js";
import type { Purging } from "./purge.js";
import { recordKey } from "./stored.js";
import { FlowStream } from "./stream.js";
import { whyUndelivered } from "./waiting.js";

/**
 * One flow's object, composed: its parts, built in the order below, and the steps of the path
 * an event takes through them. Every part reaches another only through this class, whose methods
 * are named after what the part asks (the `…Host` interface each part declares, all implemented
 * here), so the path can be read, and walked, from the route to the write it causes:
 *
 *   a runner's report → FlowCoordinator.handle → applyReported (reported.ts: its nonce)
 *     → GroupCommit.enqueue → the batch: the machine's transitions, planCommit, commitFlow
 *     → afterCommit: 1. rememberMessages  2. deliverOwnClaims  3. carryOutEffects
 *                    4. forwardToFeed     5. armAlarm  (3c. children: children.ts)
 *   the alarm, the sweep's poke → wakeUp: settle a pending plan, an owed wake, due deadlines
 *     (each an event through GroupCommit.enqueue, as above), the feed, the alarm again
 *
 * The parts: `binding` (what the object serves, and its incarnation), `nonces` (runners'
 * webhooks), `stream` (the event journal and its subscribers), `relay` (to the context's feed),
 * `outgoing` (messages created and not delivered yet), `commits` (the state's one writer),
 * `deadlines` (the alarm), `effects` (what a durable batch owes the dispatcher and runners),
 * `own` (the work a commit claims for the flow itself) and `incarnations` (storage of another
 * flow under the id is wiped before use).
 */
export class FlowObject
  implements
    CommitHost,
    DeadlineHost,
    OwnClaimsHost,
    IncarnationHost,
    EffectsHost,
    KeptEventsHost,
    ChildrenHost,
    GrowthHost,
    OwedReportsHost
{
  readonly storage: DurableObjectStorage;
  readonly binding: FlowBinding;
  readonly nonces: NonceLedger;
  readonly stream: FlowStream;
  readonly relay: FeedRelay;
  readonly outgoing = new OutgoingMessages();
  readonly commits: GroupCommit;
  readonly deadlines: Deadlines;
  readonly effects: FlowEffects;
  readonly own: OwnClaims;
  readonly incarnations: Incarnations;
  readonly kept: KeptEvents;
  readonly children: ChildFlows;
  readonly growth: Growth;
  readonly reports: OwedReports;

  constructor(
    readonly ctx: DurableObjectState,
    readonly env: Env,
  ) {
    this.storage = ctx.storage;
    this.binding = new FlowBinding(ctx.storage);
    this.nonces = new NonceLedger(ctx.storage);
    this.stream = new FlowStream(ctx);
    this.relay = new FeedRelay(env, ctx.storage, this.stream, this.binding);
    this.commits = new GroupCommit(this);
    this.deadlines = new Deadlines(this);
    this.effects = new FlowEffects(env, ctx.storage, this);
    this.own = new OwnClaims(this);
    this.incarnations = new Incarnations(this);
    this.kept = new KeptEvents(this);
    this.children = new ChildFlows(this);
    this.growth = new Growth(this);
    this.reports = new OwedReports(this);
  }

  // The path of a durable batch (CommitHost).

  /** Before a batch's commit: the cancels of children it will owe, kept durably first (children.ts). */
  beforeCommit(steps: CommitStep[]): Promise<void> {
    return this.children.owe(steps);
  }

  /** What a durable batch owes, in order. */
  async afterCommit(batch: Committed): Promise<void> {
    this.rememberMessages(batch);
    this.deliverOwnClaims(batch);
    const woken = await this.effects.committed(batch);
    this.lookBack(batch);
    this.children.committed(batch);
    this.growth.committed(batch);
    this.relay.later(this.bound(), () => void this.arm(undefined, true).catch(() => undefined));
    // A wake still owed, or memory forgotten after a conflict: the alarm comes back soon.
    const current = this.commits.current;
    await this.arm(current, !woken || current === undefined, Date.now(), batch.conflict ? undefined : batch.before);
  }

  /** 1. The attempts the batch created are delivered from memory, not read back from Redis. */
  private rememberMessages(batch: Committed): void {
    if (!batch.plan) return;
    const keys = this.store().keys;
    this.outgoing.remember((m) => keys.message(m.context_id, m.caller_id, m.id), batch.plan.messages);
  }

  /** 2. What the commit claimed for the flow goes to its runners now, beside what the commit still owes. */
  private deliverOwnClaims(batch: Committed): void {
    if (batch.outcome) this.own.claimed(batch.claims, batch.outcome);
  }

  /**
   * 3b. Waits the batch started take an event their context kept for them, if any
   * (kept-events.ts); a read that failed is tried again by the alarm, soon.
   */
  private lookBack(batch: Committed): void {
    const started = batch.steps.flatMap((s) => s.effects.flatMap((e) => (e.type === "waitStarted" ? [e.job] : [])));
    void this.kept.started(started).then((done) => (done ? undefined : this.arm(undefined, true)));
  }

  /** A plan left pending was run again and applied: what it owed dispatch is owed again. */
  async afterSettle(plan: PendingCommit): Promise<void> {
    if (!(await this.effects.resolved(plan))) await this.arm(undefined, true);
  }

  async storageDown(): Promise<void> {
    await this.deadlines.storageDown();
    await this.arm(undefined, true);
  }

  storageUp(): void {
    void this.deadlines.storageUp(this.commits.current).catch(() => undefined);
  }

  rebuild(journal: Journal): Promise<FlowState | null> {
    return this.incarnations.rebuild(journal);
  }

  ownsPending(): Promise<boolean> {
    return this.incarnations.ownsPending();
  }

  record(): { key: string; token: string } | undefined {
    const token = this.binding.incarnation;
    return token === undefined ? undefined : { key: recordKey(this.store(), this.bound()), token };
  }

  publish(state: FlowState, changes: FlowChange[]): void {
    void this.stream.append(this.bound(), state.traceId, changes);
  }

  reloaded(state: FlowState): void {
    this.stream.catchUp(this.bound(), state);
    this.kept.reloaded(state);
  }

  claims(state: FlowState, commit: CommitPlan): ReturnType<OwnClaims["claimsFor"]> {
    return this.own.claimsFor(state, commit);
  }

  claiming(): Promise<void> {
    return this.deadlines.armBy(Date.now() + CLAIM_SAFETY_MS);
  }

  assignments(outcome: CommitOutcome): FlowEvent[] {
    return assignmentsOf(outcome.claimed);
  }

  // The alarm's path.

  /**
   * Settles a pending plan and an owed wake, acts on due deadlines, and re-arms the alarm. An
   * object that lost its memory while attempts wait for a runner cannot tell whether it had
   * claimed any of them itself: the dispatcher's reaper is asked to look.
   */
  async wakeUp(): Promise<void> {
    const fresh = this.commits.current === undefined;
    await this.commits.settlePending();
    let owedDone = await this.effects.wake(undefined);
    const state = await this.incarnations.loadToAct();
    if (!state) {
      await this.deadlines.disarm();
      return;
    }
    if (fresh && state.endedAt === undefined && awaitsRunners(state))
      owedDone = (await this.effects.wake({ reap: true })) && owedDone;
    // Kept events first: a wait whose look back is owed (its object lost its memory, or the read
    // failed) takes an event that came before its timeout, which acting on the timeout would lose.
    const lookedBack = await this.kept.lookBack();
    // Reports owed before deadlines too: the attempt they end would otherwise go silent.
    const reported = await this.reports.retry().catch(() => false);
    const reached = await this.deadlines.actOnDue(state);
    const fed = await this.relay.forward(this.bound());
    const committed = () => (this.commits.busy ? undefined : (this.commits.current ?? undefined));
    const cancelled = await this.children.retryOwed(committed).catch(() => false);
    await this.arm(
      this.commits.current ?? state,
      !reached || !owedDone || !fed || !lookedBack || !cancelled || !reported,
    );
  }

  /**
   * Sets the alarm (Deadlines.arm), never later than work this object claimed must be delivered
   * by, and soon while a cancel of a child is owed (should the object die before it goes out).
   */
  arm(state: FlowState | null | undefined, retrySoon: boolean, now?: number, before?: FlowState): Promise<void> {
    const owing = this.children.owing() || this.reports.owing();
    return this.deadlines.arm(state, retrySoon || owing, now, before, this.own.safetyAt());
  }

  // What the parts ask of the object (DeadlineHost, OwnClaimsHost, IncarnationHost, EffectsHost).

  enqueue(event: FlowEvent): ReturnType<GroupCommit["enqueue"]> {
    return this.commits.enqueue(event);
  }

  /**
   * A runner's report (a webhook, or a delivery's answer): a finished one that adds jobs gets
   * their ids first (growth.ts), kept owed meanwhile (owed-reports.ts: `tries` counts the
   * alarm's); any other goes into the next batch at once.
   */
  report(
    event: FlowEvent,
    logs?: Parameters<GroupCommit["enqueue"]>[1],
    tries = 0,
  ): ReturnType<GroupCommit["enqueue"]> {
    const ready = this.growth.prepare(event);
    if (!(ready instanceof Promise)) return this.commits.enqueue(ready, logs);
    return this.reports.keep(event, logs, () => ready.then((prepared) => this.commits.enqueue(prepared, logs)), tries);
  }

  expand(job: number): Promise<void> {
    return this.growth.expand(job);
  }

  isPaused(): Promise<boolean> {
    return this.store().contextAdmin.isPaused(this.bound().contextId);
  }

  whyUndelivered(state: FlowState, job: number): Promise<string | undefined> {
    return whyUndelivered(this.env, this.bound(), state, job);
  }

  scope(): FlowScope {
    return this.bound();
  }

  later(work: Promise<unknown>): void {
    this.ctx.waitUntil(work.catch(() => undefined));
  }

  retrySoon(): Promise<void> {
    return this.arm(undefined, true);
  }

  /** What delivering this flow's attempts needs of the object. */
  owner(): AttemptOwner {
    return {
      scope: this.bound(),
      state: () => this.existing(),
      enqueue: (event, logs) => this.report(event, logs),
      store: () => this.store(),
      signingKey: async () => (await coordinatorKeys(this.env)).current,
      deliveryTimeoutMs: readDeliveryTimeoutMs(this.env),
    };
  }

  settle(runner: DeliveryTarget, items: string[], answers: OwnerAnswer[]): Promise<void> {
    return settleOwnClaims(this.env, dispatchScopeOf(this.bound()), runner, items, answers);
  }

  async owe(): Promise<void> {
    if (!(await this.effects.wake({ reap: true }))) await this.arm(undefined, true);
  }

  delivered(): void {
    void this.deadlines.claimsDelivered(this.commits.current).catch(() => undefined);
  }

  dispatched(items: readonly string[]): string[] {
    return this.own.released(items);
  }

  /** Every part that keeps memory of storage, forgotten when storage is wiped. */
  get parts(): Forgetful[] {
    return [
      this.stream,
      this.commits.pending,
      this.relay,
      this.deadlines,
      this.nonces,
      { forget: () => this.outgoing.clear() },
      { forget: () => this.own.forget() },
      this.kept,
    ];
  }

  current(): FlowState | null | undefined {
    return this.commits.current;
  }

  get seen(): GroupCommit["seen"] {
    return this.commits.seen;
  }

  load(): Promise<FlowState | null> {
    return this.commits.load();
  }

  forget(): void {
    this.commits.forget();
  }

  close(reason: string): void {
    this.stream.close(reason);
  }

  // For the RPC methods of the FlowCoordinator.

  /** What a creation uses (see creation.ts). */
  creator(): CreationHost {
    const { binding, commits, stream, relay, deadlines } = this;
    return { binding, commits, stream, relay, deadlines, store: () => this.store() };
  }

  /** What removing the flow uses (see purge.ts). */
  purging(): Purging {
    const { commits, incarnations, env } = this;
    return { commits, incarnations, env, scope: this.bound(), store: this.store() };
  }

  /** The scope the object serves (bound by its first call, or restored from storage). */
  bound(): FlowScope {
    return this.binding.bound;
  }

  store(): Store {
    return storeForPrefix(this.env, this.bound().prefix);
  }

  /** The flow in memory; not found when there is none. */
  existing(): FlowState {
    const state = this.commits.current;
    if (state) return state;
    const scope = this.bound();
    throw new Problem("not-found", `${scopeName(scope)} does not exist in context ${scope.contextId}`);
  }
}
