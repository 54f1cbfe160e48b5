import { DurableObject } from "cloudflare:workers";
import { nearestDeadline, type FlowEvent, type FlowState } from "../../shared/flow/index.js";
import { flowChange } from "../../shared/flow/changes.js";
import type { FlowProgress, FlowView } from "../../shared/model/index.js";
import { flowProgress } from "../../shared/store/flow-records.js";
import { deadlineOwner, type PurgeOutcome, type Store } from "../../shared/store/index.js";
import type {
  CreateFlowInput,
  OwnerAnswer,
  DeliveryTarget,
  EventAnswer,
  EventExtras,
  ReportedEvent,
  FlowCoordinatorRpc,
  RerunInput,
} from "../core/contracts.js";
import type { Env } from "../core/env.js";
import { toProblem } from "../core/errors.js";
import { Problem, problemData, unwrap, type RpcResult } from "../core/problem.js";
import { scopeConflict, type FlowScope } from "../core/scopes.js";
import { closeQuietly } from "../core/sockets.js";
import { createNow } from "./creation.js";
import { FlowObject } from "./flow-object.js";
import { noteNamedRunners } from "./own-claims.js";
import { purgeFlow } from "./purge.js";
import { purgeChildren, type PurgeOptions } from "./purge-children.js";
import { rerunConflict, rerunEvent } from "./rerun.js";
import { applyReported, inJobOrder } from "./reported.js";
import { sinceOf } from "./stream.js";
import { flowView } from "./view.js";
import { explainWaiting } from "./waiting.js";

/**
 * FlowCoordinator: one per flow (or per job run outside a flow), the Durable Object whose RPC
 * methods the Worker's routes, the context's dispatcher and the supervisor call. Each binds the
 * object to its scope and loads the flow (`guard`), then hands the call to the flow's object,
 * FlowObject (flow-object.ts): its parts, and the path an event takes through them to Redis.
 *
 * Transient facts (delivery, started, heartbeats, deadlines) are journalled in this object's
 * storage; after eviction it rebuilds from Redis plus that journal. Storage that belongs to
 * another incarnation of the flow (FlowBinding) is wiped before anything of it is used.
 */
export class FlowCoordinator extends DurableObject<Env> implements FlowCoordinatorRpc {
  /** The flow's object: its parts and the path an event takes through them. */
  private readonly flow = new FlowObject(this.ctx, this.env);
  /** The creation under way (see create). */
  private creating: Promise<unknown> = Promise.resolve();

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
          if (await this.flow.commits.settlePending()) this.flow.commits.forget();
          await this.flow.incarnations.clearForeign();
          if (!this.flow.commits.current) await createNow(this.flow.creator(), scope, input);
          if (input.start && this.flow.commits.current?.status === "dispatched")
            await this.flow.commits.enqueue({ type: "start", at: Date.now() });
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
   * attempts in flight are told to stop; with `compensate`, a flow with compensations unwinds.
   */
  async cancel(scope: FlowScope, reason: string, compensate = false): Promise<RpcResult<FlowView>> {
    // Refused (409, nothing written) when the flow ended with nothing of it in flight: decided
    // by the machine on the state this batch holds, so a cancel racing the flow's end is too.
    // Asked to unwind a flow that unwinds already, it is a retry: answered with the flow.
    const refused = (status: string) => `already ended (${status}): nothing is left to cancel`;
    return this.command(scope, () => ({ type: "cancel", reason, at: Date.now(), compensate }), refused);
  }

  /**
   * Runs the flow again as `input` asks (rerun.ts): each job run again gets fresh retries and a
   * fresh block of message ids. A refusal (checked before the ids are taken, and by the machine
   * on the state it applies to) is a 409 naming the flow's status and run.
   */
  async rerun(scope: FlowScope, input: RerunInput = {}): Promise<RpcResult<FlowView>> {
    return this.guard(scope, async () => {
      const event = await rerunEvent(this.bound(), this.current(), this.store(), input);
      const t = await this.flow.commits.enqueue(event);
      if (t.outcome !== "applied")
        throw (
          rerunConflict(this.bound(), t.state, event) ??
          new Problem("conflict", t.reason ?? "the flow could not be re-run")
        );
      return this.viewOf(this.current());
    });
  }

  /** With `explain`, jobs waiting for a runner say why (the context's dispatcher is asked). */
  async view(scope: FlowScope, options: { explain?: boolean } = {}): Promise<RpcResult<FlowView | null>> {
    return this.guard(scope, async () => {
      const state = await this.flow.incarnations.recheck();
      if (!state) return null;
      // The number read with the state it describes: events committed while the dispatcher is
      // asked come after it, so a subscriber starting from it misses none.
      const seq = this.flow.stream.lastSeq();
      const waiting = options.explain ? await explainWaiting(this.env, this.bound(), state) : undefined;
      return { ...flowView(state, waiting), last_seq: seq };
    });
  }

  /** How many of its jobs are in each status, for a list's live progress; null when there is no such flow. */
  async progress(scope: FlowScope): Promise<RpcResult<FlowProgress | null>> {
    return this.guard(scope, async () => {
      const state = await this.flow.incarnations.recheck();
      return state ? flowProgress(state) : null;
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

  /** An event a wait of the flow matched: applied like any event, no nonce (the event's id is its own guard). */
  async takeEvent(scope: FlowScope, event: Extract<FlowEvent, { type: "event" }>): Promise<RpcResult<EventAnswer>> {
    return this.fromOutside(scope, event);
  }

  /** A child flow of one of the flow's jobs ended: applied like any event (it names its job, attempt and child). */
  async childEnded(
    scope: FlowScope,
    event: Extract<FlowEvent, { type: "childEnded" }>,
  ): Promise<RpcResult<EventAnswer>> {
    return this.fromOutside(scope, event);
  }

  /** An event from outside the flow's runners, guarded by what it names (no nonce), answered with its job's status. */
  private fromOutside(scope: FlowScope, event: Extract<FlowEvent, { type: "event" | "childEnded" }>) {
    return this.guard(scope, async (): Promise<EventAnswer> => {
      this.current();
      const t = await this.flow.commits.enqueue(event);
      const job = t.state.jobs.get(event.job);
      return { outcome: t.outcome, ...(t.reason ? { reason: t.reason } : {}), ...(job ? { status: job.status } : {}) };
    });
  }

  /** A runner's event, once the flow is known to exist. */
  private applyReported(event: FlowEvent, extras: EventExtras): Promise<EventAnswer> {
    // A finished report that adds jobs gets their ids first (FlowObject.report).
    const reporter = {
      enqueue: (e: FlowEvent, logs?: Parameters<FlowObject["report"]>[1]) => this.flow.report(e, logs),
    };
    return applyReported(this.flow.nonces, reporter, this.bound().origin, event, extras);
  }

  async deliver(scope: FlowScope, items: string[], runner: DeliveryTarget): Promise<RpcResult<OwnerAnswer[]>> {
    return this.guard(scope, () => this.flow.own.asked(items, runner));
  }

  /** Also refreshes the flow's entry in the context's deadline set, which the sweep reads. */
  async tick(scope: FlowScope): Promise<RpcResult<null>> {
    return this.guard(scope, async () => {
      await this.flow.wakeUp();
      const state = this.flow.commits.current;
      if (!state) return null;
      const due = state.endedAt === undefined ? nearestDeadline(state) : undefined;
      await this.store().sweep.setCheck(state.contextId, deadlineOwner(state), due?.at);
      return null;
    });
  }

  async announce(scope: FlowScope, type: "flow.paused" | "flow.resumed", reason: string): Promise<RpcResult<null>> {
    return this.guard(scope, async () => {
      const state = this.current();
      if (state.endedAt !== undefined || this.flow.stream.lastFlowEvent() === type) return null;
      this.flow.stream.append(this.bound(), state.traceId, [flowChange(type, state, Date.now(), { reason })]);
      if (!(await this.flow.relay.forward(this.bound()))) await this.flow.arm(state, true);
      return null;
    });
  }

  /**
   * Removes the flow for good (see purge.ts): its children first (purge-children.ts), then the
   * flow itself with nothing else running in the object meanwhile.
   */
  async purge(scope: FlowScope, options: PurgeOptions = {}): Promise<RpcResult<PurgeOutcome>> {
    const purge = () => purgeFlow(this.flow.purging(), options.force === true);
    return this.guard(
      scope,
      async () => {
        const p = this.flow.purging();
        const load = () => p.commits.load();
        const first = await purgeChildren({ load, env: p.env, scope: p.scope, store: p.store }, options);
        return first ?? this.ctx.blockConcurrencyWhile(purge);
      },
      false,
    );
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
    return this.flow.stream.subscribe(sinceOf(url));
  }

  /** Subscribers only listen: what one sends is ignored (the object is not kept awake for it). */
  override webSocketMessage(): void {}

  override webSocketClose(socket: WebSocket, code: number, reason: string): void {
    closeQuietly(socket, code, reason);
  }

  override async alarm(): Promise<void> {
    // A fresh instance can be woken by its alarm before any call told it its scope.
    this.flow.deadlines.rang();
    if (!(await this.flow.binding.restore())) return;
    try {
      await this.flow.wakeUp();
    } catch (error) {
      if (toProblem(error).status === 500) console.error("FlowCoordinator alarm:", error);
      await this.flow.arm(undefined, true);
    }
  }

  /**
   * Binds and (unless `load` is false) loads, runs `work`, and turns any failure into a problem
   * the caller can rethrow.
   */
  private async guard<T>(scope: FlowScope, work: () => Promise<T>, load = true): Promise<RpcResult<T>> {
    try {
      await this.flow.binding.bind(scope);
      if (load && (await this.flow.commits.load())) await this.flow.binding.keep();
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
      const t = await this.flow.commits.enqueue(event());
      if (refused && t.outcome !== "applied" && t.outcome !== "duplicate")
        throw scopeConflict(this.bound(), t.state.status, refused(t.state.status));
      return this.viewOf(this.current());
    });
  }

  /** The flow's view, with the number of its latest event (subscribe after it for what follows). */
  private viewOf(state: FlowState, waiting?: Parameters<typeof flowView>[1]): FlowView {
    return { ...flowView(state, waiting), last_seq: this.flow.stream.lastSeq() };
  }

  private bound(): FlowScope {
    return this.flow.bound();
  }

  private store(): Store {
    return this.flow.store();
  }

  private current(): FlowState {
    return this.flow.existing();
  }
}
