import { DurableObject } from "cloudflare:workers";
import { nearestDeadline, type FlowEvent, type FlowState } from "../../shared/flow/index.js";
import type { FlowView } from "../../shared/model/index.js";
import { deadlineOwner, type PurgeOutcome, type Store } from "../../shared/store/index.js";
import type {
  CreateFlowInput,
  OwnerAnswer,
  DeliveryTarget,
  EventAnswer,
  EventExtras,
  ReportedEvent,
  FlowCoordinatorRpc,
} from "../core/contracts.js";
import { readDeliveryTimeoutMs } from "../core/config.js";
import { coordinatorKeys } from "../core/coordinator-key.js";
import type { Env } from "../core/env.js";
import { toProblem } from "../core/errors.js";
import { Problem, problemData, unwrap, type RpcResult } from "../core/problem.js";
import { dispatchScopeOf, scopeConflict, scopeName, type FlowScope } from "../core/scopes.js";
import { storeForPrefix } from "../core/store.js";
import { flowChange } from "../../shared/flow/changes.js";
import { closeQuietly } from "../core/sockets.js";
import { settleOwnClaims } from "../core/stubs.js";
import { OutgoingMessages, type AttemptOwner } from "./attempt-delivery.js";
import { assignmentsOf, awaitsRunners, CLAIM_SAFETY_MS, noteNamedRunners, OwnClaims } from "./own-claims.js";
import { FlowBinding } from "./binding.js";
import { createNow, rerunEvent } from "./creation.js";
import { Deadlines } from "./deadlines.js";
import { FlowEffects } from "./effects.js";
import { FeedRelay } from "./feed-relay.js";
import { GroupCommit } from "./group-commit.js";
import { Incarnations } from "./incarnation.js";
import { NonceLedger } from "./nonces.js";
import { purgeFlow } from "./purge-flow.js";
import { applyReported, inJobOrder } from "./reported.js";
import { recordKey } from "./stored.js";
import { FlowStream, sinceOf } from "./stream.js";
import { flowView } from "./view.js";
import { explainWaiting, whyUndelivered } from "./waiting.js";

/**
 * FlowCoordinator: one per flow (or per job run outside a flow), a thin shell around the pure
 * state machine. It receives events (RPC from the Worker's routes, the context's dispatcher and
 * the supervisor) and hands them to its parts:
 *
 * - GroupCommit applies them to the machine and writes each batch as one script (and keeps a
 *   commit whose outcome is unknown pending until it is known);
 * - FlowEffects carries out what a durable batch owes (waking the dispatcher, telling runners);
 * - Deadlines holds the flow's alarm at its nearest deadline and acts on missed ones;
 * - OwnClaims delivers the work a commit claimed for the flow itself, when no other flow waits;
 * - FlowStream journals every change as a numbered event and pushes it to subscribers'
 *   WebSockets (hibernatable), and FeedRelay forwards the flow's own events to its context's feed.
 *
 * Transient facts (delivery, started, heartbeats, deadlines) are journalled in this object's
 * storage; after eviction it rebuilds from Redis plus that journal. Storage that belongs to
 * another incarnation of the flow (FlowBinding) is wiped before anything of it is used.
 */
export class FlowCoordinator extends DurableObject<Env> implements FlowCoordinatorRpc {
  private readonly binding = new FlowBinding(this.ctx.storage);
  private readonly nonces = new NonceLedger(this.ctx.storage);
  /** The creation under way (see create). */
  private creating: Promise<unknown> = Promise.resolve();
  private readonly outgoing = new OutgoingMessages();
  private readonly stream = new FlowStream(this.ctx);
  private readonly relay = new FeedRelay(this.env, this.ctx.storage, this.stream, () => this.binding.incarnation);
  private readonly effects = new FlowEffects(
    this.env,
    this.ctx.storage,
    () => this.bound(),
    () => this.store(),
    (items) => this.own.released(items),
  );
  private readonly own: OwnClaims = new OwnClaims({
    scope: () => this.bound(),
    owner: () => this.attemptOwner(),
    outgoing: this.outgoing,
    settle: (runner, items, answers) =>
      settleOwnClaims(this.env, dispatchScopeOf(this.bound()), runner, items, answers),
    delivered: () => void this.deadlines.claimsDelivered(this.commits.current).catch(() => undefined),
    owe: async () => {
      if (!(await this.effects.wake({ reap: true }))) await this.arm(undefined, true);
    },
  });
  private readonly deadlines: Deadlines = new Deadlines({
    storage: this.ctx.storage,
    enqueue: (event) => this.commits.enqueue(event),
    isPaused: () => this.store().contextAdmin.isPaused(this.bound().contextId),
    whyUndelivered: (state, job) => whyUndelivered(this.env, this.bound(), state, job),
  });
  private readonly commits: GroupCommit = new GroupCommit({
    storage: this.ctx.storage,
    store: () => this.store(),
    rebuild: (journal) => this.incarnations.rebuild(journal),
    ownsPending: () => this.incarnations.ownsPending(),
    record: () => {
      const token = this.binding.incarnation;
      return token === undefined ? undefined : { key: recordKey(this.store(), this.bound()), token };
    },
    publish: (state, changes) => void this.stream.append(this.bound(), state.traceId, changes),
    reloaded: (state) => this.stream.catchUp(this.bound(), state),
    claims: (state, commit) => this.own.claimsFor(state, commit),
    claiming: () => this.deadlines.armBy(Date.now() + CLAIM_SAFETY_MS),
    assignments: (outcome) => assignmentsOf(outcome.claimed),
    committed: async (batch) => {
      if (batch.plan)
        this.outgoing.remember((m) => this.store().keys.message(m.context_id, m.caller_id, m.id), batch.plan.messages);
      // What the commit claimed goes to its runners now, beside what the commit still owes.
      if (batch.outcome) this.own.claimed(batch.claims, batch.outcome);
      const woken = await this.effects.committed(batch);
      this.relay.later(this.bound(), () => void this.arm(undefined, true).catch(() => undefined));
      // A wake still owed, or memory forgotten after a conflict: the alarm comes back soon.
      await this.arm(
        this.commits.current,
        !woken || this.commits.current === undefined,
        Date.now(),
        batch.conflict ? undefined : batch.before,
      );
    },
    resolved: async (plan) => {
      if (!(await this.effects.resolved(plan))) await this.arm(undefined, true);
    },
    storageDown: async () => {
      await this.deadlines.storageDown();
      await this.arm(undefined, true);
    },
    storageUp: () => void this.deadlines.storageUp(this.commits.current).catch(() => undefined),
  });
  private readonly incarnations: Incarnations = new Incarnations({
    ctx: this.ctx,
    binding: this.binding,
    parts: [
      this.stream,
      this.relay,
      this.deadlines,
      this.nonces,
      { forget: () => this.outgoing.clear() },
      { forget: () => this.own.forget() },
    ],
    store: () => this.store(),
    current: () => this.commits.current,
    seen: this.commits.seen,
    load: () => this.commits.load(),
    forget: () => this.commits.forget(),
    close: (reason) => this.stream.close(reason),
  });

  // RPC methods, called by the Worker's routes, the dispatcher and the supervisor.

  /**
   * Stores the flow, and starts it in the same script call when `start` is asked. Memory is not
   * read from storage first: the script itself refuses an id that is taken, and only then is
   * the flow there read (a retried submission, or another flow under a chosen id).
   */
  async create(scope: FlowScope, input: CreateFlowInput): Promise<RpcResult<FlowView>> {
    return this.guard(
      scope,
      () => {
        // One creation at a time: a second (a retry racing the first) finds the flow in memory.
        if (input.pushRunners) noteNamedRunners(scope, input.pushRunners);
        const turn = this.creating.then(async () => {
          // A creation whose outcome was unknown is settled before anything else.
          if (await this.commits.settlePending()) this.commits.forget();
          await this.incarnations.clearForeign();
          if (!this.commits.current) await createNow(this.creator(), scope, input);
          if (input.start && this.commits.current?.status === "dispatched")
            await this.commits.enqueue({ type: "start", at: Date.now() });
          return this.viewOf(this.current());
        });
        this.creating = turn.catch(() => undefined);
        return turn;
      },
      false,
    );
  }

  async start(scope: FlowScope): Promise<RpcResult<FlowView>> {
    return this.command(scope, () => ({ type: "start", at: Date.now() }));
  }

  /**
   * Nothing more is dispatched, what is not ended errors as cancelled, and the runners of
   * attempts in flight are told to stop.
   */
  async cancel(scope: FlowScope, reason: string): Promise<RpcResult<FlowView>> {
    // Refused (409, nothing written) when the flow ended with nothing of it in flight: decided
    // by the machine on the state this batch holds, so a cancel racing the flow's end is too.
    const refused = (status: string) => `already ended (${status}): nothing is left to cancel`;
    return this.command(scope, () => ({ type: "cancel", reason, at: Date.now() }), refused);
  }

  /** Each failed job gets fresh retries and a fresh block of message ids (rerunEvent). */
  async rerun(scope: FlowScope): Promise<RpcResult<FlowView>> {
    return this.guard(scope, async () => {
      const t = await this.commits.enqueue(await rerunEvent(this.bound(), this.current(), this.store()));
      if (t.outcome !== "applied") throw new Problem("conflict", t.reason ?? "the flow could not be re-run");
      return this.viewOf(this.current());
    });
  }

  /** With `explain`, jobs waiting for a runner say why (the context's dispatcher is asked). */
  async view(scope: FlowScope, options: { explain?: boolean } = {}): Promise<RpcResult<FlowView | null>> {
    return this.guard(scope, async () => {
      const state = await this.incarnations.recheck();
      if (!state) return null;
      // The number read with the state it describes: events committed while the dispatcher is
      // asked come after it, so a subscriber starting from it misses none.
      const seq = this.stream.lastSeq();
      const waiting = options.explain ? await explainWaiting(this.env, this.bound(), state) : undefined;
      return { ...flowView(state, waiting), last_seq: seq };
    });
  }

  /** A replayed nonce is refused before anything else. */
  async handle(scope: FlowScope, event: FlowEvent, extras: EventExtras = {}): Promise<RpcResult<EventAnswer>> {
    return this.guard(scope, async () => {
      this.current(); // no such flow: not found, before a nonce is spent
      return this.applyReported(event, extras);
    });
  }

  async handleMany(scope: FlowScope, events: ReportedEvent[]): Promise<RpcResult<RpcResult<EventAnswer>[]>> {
    return this.guard(scope, async () => {
      this.current();
      return inJobOrder(events, (event, extras) => this.applyReported(event, extras));
    });
  }

  /** A runner's event, once the flow is known to exist. */
  private applyReported(event: FlowEvent, extras: EventExtras): Promise<EventAnswer> {
    return applyReported(this.nonces, this.commits, this.bound().origin, event, extras);
  }

  async deliver(scope: FlowScope, items: string[], runner: DeliveryTarget): Promise<RpcResult<OwnerAnswer[]>> {
    return this.guard(scope, () => this.own.asked(items, runner));
  }

  /** Also refreshes the flow's entry in the context's deadline set, which the sweep reads. */
  async tick(scope: FlowScope): Promise<RpcResult<null>> {
    return this.guard(scope, async () => {
      await this.wakeUp();
      const state = this.commits.current;
      if (!state) return null;
      const due = state.endedAt === undefined ? nearestDeadline(state) : undefined;
      await this.store().sweep.setCheck(state.contextId, deadlineOwner(state), due?.at);
      return null;
    });
  }

  async announce(scope: FlowScope, type: "flow.paused" | "flow.resumed", reason: string): Promise<RpcResult<null>> {
    return this.guard(scope, async () => {
      const state = this.current();
      if (state.endedAt !== undefined || this.stream.lastFlowEvent() === type) return null;
      this.stream.append(this.bound(), state.traceId, [flowChange(type, state, Date.now(), { reason })]);
      if (!(await this.relay.forward(this.bound()))) await this.arm(state, true);
      return null;
    });
  }

  /** Removes the flow for good (see purge-flow.ts); nothing else runs in the object meanwhile. */
  async purge(scope: FlowScope, options: { force?: boolean } = {}): Promise<RpcResult<PurgeOutcome>> {
    const { commits, incarnations, env } = this;
    const purge = () =>
      purgeFlow({ commits, incarnations, env, scope: this.bound(), store: this.store() }, options.force === true);
    return this.guard(scope, () => this.ctx.blockConcurrencyWhile(purge), false);
  }

  /**
   * A subscriber's WebSocket on the flow's event stream (the Worker checked that the caller may
   * read the flow, and passes the scope in `x-flow-scope`): see FlowStream.subscribe.
   */
  override async fetch(request: Request): Promise<Response> {
    const url = new URL(request.url);
    const scope = JSON.parse(request.headers.get("x-flow-scope") ?? "null") as FlowScope | null;
    if (!scope || request.headers.get("upgrade")?.toLowerCase() !== "websocket")
      return new Problem("bad-request", "a flow's event stream is a WebSocket upgrade").toResponse(url.pathname);
    try {
      unwrap(await this.guard(scope, async () => this.current()));
    } catch (error) {
      return toProblem(error).toResponse(url.pathname);
    }
    return this.stream.subscribe(sinceOf(url));
  }

  /** Subscribers only listen: what one sends is ignored (the object is not kept awake for it). */
  override webSocketMessage(): void {}

  override webSocketClose(socket: WebSocket, code: number, reason: string): void {
    closeQuietly(socket, code, reason);
  }

  override async alarm(): Promise<void> {
    // A fresh instance can be woken by its alarm before any call told it its scope.
    this.deadlines.rang();
    if (!(await this.binding.restore())) return;
    try {
      await this.wakeUp();
    } catch (error) {
      if (toProblem(error).status === 500) console.error("FlowCoordinator alarm:", error);
      await this.arm(undefined, true);
    }
  }

  // Internals.

  /**
   * Settles a pending plan and an owed wake, acts on due deadlines, and re-arms the alarm. An
   * object that lost its memory while attempts wait for a runner cannot tell whether it had
   * claimed any of them itself: the dispatcher's reaper is asked to look.
   */
  private async wakeUp(): Promise<void> {
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
    const reached = await this.deadlines.actOnDue(state);
    const fed = await this.relay.forward(this.bound());
    await this.arm(this.commits.current ?? state, !reached || !owedDone || !fed);
  }

  /** Sets the alarm (Deadlines.arm), never later than work this object claimed must be delivered by. */
  private arm(
    state: FlowState | null | undefined,
    retrySoon: boolean,
    now?: number,
    before?: FlowState,
  ): Promise<void> {
    return this.deadlines.arm(state, retrySoon, now, before, this.own.safetyAt());
  }

  /** What delivering this flow's attempts needs of the object. */
  private attemptOwner(): AttemptOwner {
    return {
      scope: this.bound(),
      state: () => this.current(),
      enqueue: (event, logs) => this.commits.enqueue(event, logs),
      store: () => this.store(),
      signingKey: async () => (await coordinatorKeys(this.env)).current,
      deliveryTimeoutMs: readDeliveryTimeoutMs(this.env),
    };
  }

  /**
   * Binds and (unless `load` is false) loads, runs `work`, and turns any failure into a problem
   * the caller can rethrow.
   */
  private async guard<T>(scope: FlowScope, work: () => Promise<T>, load = true): Promise<RpcResult<T>> {
    try {
      await this.binding.bind(scope);
      if (load && (await this.commits.load())) await this.binding.keep();
      return { ok: await work() };
    } catch (error) {
      const problem = toProblem(error);
      if (problem.status === 500) console.error("FlowCoordinator:", error);
      return { problem: problemData(problem) };
    }
  }

  /** Runs an admin's command, answering the flow as it is then (not applied: a 409 if `refused` says why). */
  private command(scope: FlowScope, event: () => FlowEvent, refused?: (status: string) => string) {
    return this.guard(scope, async () => {
      this.current();
      const t = await this.commits.enqueue(event());
      if (refused && t.outcome !== "applied")
        throw scopeConflict(this.bound(), t.state.status, refused(t.state.status));
      return this.viewOf(this.current());
    });
  }

  /** What a creation uses (see creation.ts). */
  private creator(): Parameters<typeof createNow>[0] {
    const { binding, commits, stream, relay, deadlines } = this;
    return { binding, commits, stream, relay, deadlines, store: () => this.store() };
  }

  /** The flow's view, with the number of its latest event (subscribe after it for what follows). */
  private viewOf(state: FlowState, waiting?: Parameters<typeof flowView>[1]): FlowView {
    return { ...flowView(state, waiting), last_seq: this.stream.lastSeq() };
  }

  private bound(): FlowScope {
    return this.binding.bound;
  }

  private store(): Store {
    return storeForPrefix(this.env, this.bound().prefix);
  }

  private current(): FlowState {
    const state = this.commits.current;
    if (state) return state;
    const scope = this.bound();
    throw new Problem("not-found", `${scopeName(scope)} does not exist in context ${scope.contextId}`);
  }
}
