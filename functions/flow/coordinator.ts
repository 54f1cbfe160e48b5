import { DurableObject } from "cloudflare:workers";
import {
  failedJobs,
  messagesNeeded,
  nearestDeadline,
  newFlowState,
  rebuildState,
  rerunBases,
  type DagJob,
  type FlowEvent,
  type FlowState,
  type FlowTimeouts,
  type Journal,
  type JobState,
  type Transition,
} from "../../shared/flow/index.js";
import type { JobWaiting, Log } from "../../shared/model/index.js";
import { callRedis, ConflictError, deadlineMember, jobRecord, NotFoundError, type Store } from "../../shared/store/index.js";
import { toProblem } from "../api/errors.js";
import { Problem, problemData, type Outcome } from "../api/problem.js";
import { bindScope, storeForPrefix } from "../api/store.js";
import { coordinatorKeys } from "../coordinator-key.js";
import { dispatcherStub } from "../dispatch/scope.js";
import type { Env } from "../env.js";
import { deliverAttempt, OutgoingMessages, type DeliverAnswer, type DeliveryTarget } from "./attempt-delivery.js";
import { Deadlines } from "./deadlines.js";
import { FlowEffects } from "./effects.js";
import { GroupCommit } from "./group-commit.js";
import { NonceLedger } from "./nonces.js";
import type { FlowScope } from "./scope.js";
import { flowView, waitingForRunner, type FlowView } from "./view.js";

/** What `create` needs: the resolved DAG and the ids reserved for it. */
export interface CreateFlowInput {
  callerId: number;
  jobs: DagJob[];
  envVars: Record<string, string>;
  timeouts: FlowTimeouts;
  traceId: string;
  messageBase: number;
  /** Positions of jobs whose ids the caller chose (only those can collide). */
  chosen: number[];
  start: boolean;
}

/** How a runner's or the relay's event was taken. */
export interface EventAnswer {
  outcome: Transition["outcome"] | "replayed";
  reason?: string;
  status?: JobState["status"];
  /** The coordinator origin this flow's runners call back (from the request that created it). */
  origin?: string;
}

/**
 * FlowCoordinator: one per flow (or per job run outside a flow), a thin shell around the pure
 * state machine: it receives events (RPC from the Worker's routes, the context's dispatcher and
 * the supervisor), has GroupCommit apply and write them, and carries out what each durable batch
 * owes (FlowEffects). Transient facts (delivery, started, heartbeats, deadlines) are journalled
 * in this object's storage; after eviction it rebuilds from Redis plus that journal. Its alarm
 * holds the flow's nearest deadline (Deadlines).
 */
export class FlowCoordinator extends DurableObject<Env> {
  private scope: FlowScope | undefined;
  private readonly effects = new FlowEffects(this.env, this.ctx.storage, () => this.scope as FlowScope, () => this.store());
  private readonly deadlines = new Deadlines({
    storage: this.ctx.storage,
    enqueue: (event) => this.commits.enqueue(event),
    isPaused: () => this.store().contextAdmin.isPaused((this.scope as FlowScope).contextId),
    whyUndelivered: (state, job) => this.whyUndelivered(state, job),
  });
  private readonly commits: GroupCommit = new GroupCommit({
    storage: this.ctx.storage,
    store: () => this.store(),
    rebuild: (journal) => this.rebuild(journal),
    committed: async (batch) => {
      if (batch.plan) this.outgoing.remember((m) => this.store().keys.message(m.context_id, m.caller_id, m.id), batch.plan.messages);
      const woken = await this.effects.committed(batch);
      // A wake still owed, or memory forgotten after a conflict: the alarm comes back soon.
      await this.deadlines.arm(this.commits.current, !woken || this.commits.current === undefined);
    },
    resolved: async (plan) => {
      if (!(await this.effects.resolved(plan))) await this.deadlines.arm(undefined, true);
    },
    storageDown: async () => {
      await this.deadlines.storageDown();
      await this.deadlines.arm(undefined, true);
    },
    storageUp: () => void this.deadlines.storageUp(this.commits.current).catch(() => undefined),
  });
  private readonly nonces = new NonceLedger(this.ctx.storage);
  private readonly outgoing = new OutgoingMessages();

  // RPC methods, called by the Worker's routes, the dispatcher and the supervisor.

  /** Creates the flow (idempotent: an existing flow is returned as it is) and maybe starts it. */
  async create(scope: FlowScope, input: CreateFlowInput): Promise<Outcome<FlowView>> {
    return this.guard(scope, async () => {
      if (!this.commits.current) {
        const state = newFlowState({ id: scope.flowId, contextId: scope.contextId, callerId: input.callerId, envVars: input.envVars, timeouts: input.timeouts, traceId: input.traceId, jobs: input.jobs, messageBase: input.messageBase });
        let created: boolean;
        try {
          created = await this.persistNew(state, input.chosen);
        } catch (error) {
          // The outcome may be unknown (storage timed out, yet may run it): read it back next time.
          this.commits.forget();
          throw error;
        }
        if (created) this.commits.adopt(state);
        else this.commits.forget();
        await this.commits.load();
      }
      if (input.start && this.commits.current?.status === "dispatched") await this.commits.enqueue({ type: "start", at: Date.now() });
      return flowView(this.current());
    });
  }

  /** Starts the flow; starting a started flow changes nothing. */
  async start(scope: FlowScope): Promise<Outcome<FlowView>> {
    return this.command(scope, () => ({ type: "start", at: Date.now() }));
  }

  /**
   * Cancels the flow: nothing more is dispatched, what is not ended errors as cancelled, and the
   * runners of attempts in flight are told to stop. Cancelling twice changes nothing.
   */
  async cancel(scope: FlowScope, reason: string): Promise<Outcome<FlowView>> {
    return this.command(scope, () => ({ type: "cancel", reason, at: Date.now() }));
  }

  /**
   * Runs a failed flow again from its failed jobs (finished jobs keep their results). Each
   * failed job gets fresh retries and a fresh block of message ids, allocated here.
   */
  async rerun(scope: FlowScope): Promise<Outcome<FlowView>> {
    return this.guard(scope, async () => {
      const state = this.current();
      // The machine refuses this too; asking first keeps a refused re-run from using up ids.
      if (state.status !== "error") throw new Problem(409, "conflict", "Conflict", `only a failed flow can be re-run; flow ${state.id} is ${state.status}`);
      const needed = messagesNeeded(failedJobs(state).map((id) => (state.jobs[id] as JobState).spec));
      const first = await this.store().messageStore.allocateIds(state.contextId, state.callerId, needed);
      const t = await this.commits.enqueue({ type: "rerun", bases: rerunBases(state, first), at: Date.now() });
      if (t.outcome !== "applied") throw new Problem(409, "conflict", "Conflict", t.reason ?? "the flow could not be re-run");
      return flowView(this.current());
    });
  }

  /**
   * The flow with every job's live status, or null when there is no such flow. With `explain`,
   * jobs waiting for a runner say why (the context's dispatcher is asked).
   */
  async view(scope: FlowScope, options: { explain?: boolean } = {}): Promise<Outcome<FlowView | null>> {
    return this.guard(scope, async () => {
      const state = this.commits.current;
      if (!state) return null;
      return flowView(state, options.explain ? await this.explainWaiting(state) : new Map());
    });
  }

  /**
   * Applies an event from a runner (with its signature's nonce, refused when replayed). Resolves
   * once the transition is durable.
   */
  async handle(scope: FlowScope, event: FlowEvent, extra: { nonce?: { keyid: string; value: string; ttlMs: number }; logs?: Log[] } = {}): Promise<Outcome<EventAnswer>> {
    return this.guard(scope, async () => {
      this.current(); // no such flow: not found, before a nonce is spent
      if (extra.nonce && !(await this.nonces.use(extra.nonce.keyid, extra.nonce.value, extra.nonce.ttlMs))) {
        return { outcome: "replayed", reason: "this nonce was already used: sign every request with a new nonce" };
      }
      const logs = extra.logs && "job" in event ? { job: event.job, lines: extra.logs } : undefined;
      // The jitter of a retry's backoff is chosen here, so the machine stays pure.
      const t = await this.commits.enqueue(event.type === "failed" ? { ...event, random: Math.random() } : event, logs);
      const job = "job" in event ? t.state.jobs[event.job] : undefined;
      return { outcome: t.outcome, ...(t.reason ? { reason: t.reason } : {}), ...(job ? { status: job.status } : {}), origin: this.scope?.origin ?? "" };
    });
  }

  /** Delivers a claimed attempt (a work item) to the runner its slot was claimed at. */
  async deliver(scope: FlowScope, item: string, runner: DeliveryTarget): Promise<Outcome<DeliverAnswer>> {
    return this.guard(scope, () =>
      deliverAttempt(
        {
          scope: this.scope as FlowScope,
          state: () => this.current(),
          enqueue: (event) => this.commits.enqueue(event),
          store: () => this.store(),
          signingKey: async () => (await coordinatorKeys(this.env)).current,
        },
        this.outgoing,
        item,
        runner,
      ),
    );
  }

  /** The supervisor's poke: settle what is pending, act on due deadlines, refresh the deadline entry. */
  async tick(scope: FlowScope): Promise<Outcome<null>> {
    return this.guard(scope, async () => {
      await this.wakeUp();
      const state = this.commits.current;
      if (!state) return null;
      const store = this.store();
      const member = deadlineMember(state);
      const due = state.endedAt === undefined ? nearestDeadline(state) : undefined;
      await callRedis(() =>
        due ? store.redis.exec(["ZADD", store.keys.deadlines(state.contextId), String(due.at), member]) : store.redis.exec(["ZREM", store.keys.deadlines(state.contextId), member]),
      );
      return null;
    });
  }

  override async alarm(): Promise<void> {
    // A fresh instance can be woken by its alarm before any call told it its scope.
    this.scope ??= await this.ctx.storage.get<FlowScope>("scope");
    if (!this.scope) return;
    try {
      await this.wakeUp();
    } catch (error) {
      if (toProblem(error).status === 500) console.error("FlowCoordinator alarm:", error);
      await this.deadlines.arm(undefined, true);
    }
  }

  // Internals.

  /** Settles a pending plan and an owed wake, acts on due deadlines, and re-arms the alarm. */
  private async wakeUp(): Promise<void> {
    await this.commits.settlePending();
    const owedDone = await this.effects.wake(undefined);
    const state = await this.commits.load();
    if (!state) {
      await this.ctx.storage.deleteAlarm();
      return;
    }
    const reached = await this.deadlines.actOnDue(state);
    await this.deadlines.arm(this.commits.current ?? state, !reached || !owedDone);
  }

  /** Binds and loads, runs `work`, and turns any failure into a problem the caller can rethrow. */
  private async guard<T>(scope: FlowScope, work: () => Promise<T>): Promise<Outcome<T>> {
    try {
      await this.bind(scope);
      await this.commits.load();
      return { ok: await work() };
    } catch (error) {
      const problem = toProblem(error);
      if (problem.status === 500) console.error("FlowCoordinator:", error);
      return { problem: problemData(problem) };
    }
  }

  /** Runs one event as an admin's command and answers the flow as it is then. */
  private command(scope: FlowScope, event: () => FlowEvent): Promise<Outcome<FlowView>> {
    return this.guard(scope, async () => {
      this.current();
      await this.commits.enqueue(event());
      return flowView(this.current());
    });
  }

  private async bind(scope: FlowScope): Promise<void> {
    this.scope ??= await bindScope(this.ctx.storage, scope);
  }

  private store(): Store {
    return storeForPrefix(this.env, (this.scope as FlowScope).prefix);
  }

  private current(): FlowState {
    const state = this.commits.current;
    if (!state) throw new NotFoundError("flow", String(this.scope?.flowId));
    return state;
  }

  /** Reads the flow from Redis plus the journal of this object's storage. */
  private async rebuild(journal: Journal): Promise<FlowState | null> {
    const scope = this.scope as FlowScope;
    const store = this.store();
    if (scope.job) {
      const { jobs, messages } = await store.flowStore.loadJobs(scope.contextId, scope.job.callerId, [scope.job.id]);
      return jobs.length === 0 ? null : rebuildState({ flow: null, contextId: scope.contextId, callerId: scope.job.callerId, jobs, messages, journal });
    }
    const stored = await store.flowStore.load(scope.contextId, scope.flowId);
    return stored?.flow ? rebuildState({ flow: stored.flow, contextId: scope.contextId, callerId: stored.flow.caller_id, jobs: stored.jobs, messages: stored.messages, journal }) : null;
  }

  private async persistNew(state: FlowState, chosen: number[]): Promise<boolean> {
    const store = this.store();
    if (!this.scope?.job) return store.flowStore.create(state, chosen, Date.now());
    try {
      const { created_at: _c, updated_at: _u, ...record } = jobRecord(state, state.jobs[state.order[0] as number] as JobState, Date.now());
      // Without a flow record, the job keeps the timeouts it runs with (rebuildState reads them).
      await store.jobs.create({ ...record, timeouts: state.timeouts });
      return true;
    } catch (error) {
      if (error instanceof ConflictError && chosen.length === 0) return false;
      throw error;
    }
  }

  /** Why each job waiting for a runner waits, as the context's dispatcher sees it. */
  private async explainWaiting(state: FlowState): Promise<Map<number, JobWaiting>> {
    const jobs = waitingForRunner(state);
    if (jobs.length === 0) return new Map();
    const scope = this.scope as FlowScope;
    const wants = jobs.map((job) => ({ scriptType: job.spec.script_type, ...(job.spec.runner_id !== undefined ? { runnerId: job.spec.runner_id } : {}) }));
    const reasons = await dispatcherStub(this.env, { prefix: scope.prefix, contextId: scope.contextId, origin: scope.origin }).explain(
      { prefix: scope.prefix, contextId: scope.contextId, origin: scope.origin },
      wants,
    );
    return new Map(
      jobs.map((job, i) => {
        const r = reasons[i];
        const refused = job.refused ? `; last delivery: ${job.refused}` : "";
        return [job.id, r ? { reason: r.reason, detail: `${r.detail}${refused}`, ...(r.until !== undefined ? { until: Math.floor(r.until / 1000) } : {}) } : { reason: "queued", detail: "waiting for a runner" }];
      }),
    );
  }

  /** For a missed delivery deadline: why no runner took the attempt. */
  private async whyUndelivered(state: FlowState, jobId: number): Promise<string | undefined> {
    try {
      return (await this.explainWaiting(state)).get(jobId)?.detail;
    } catch {
      return undefined;
    }
  }
}
