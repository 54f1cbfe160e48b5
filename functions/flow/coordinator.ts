import { DurableObject } from "cloudflare:workers";
import {
  apply,
  journalOf,
  nearestDeadline,
  newFlowState,
  rebuildState,
  type DagJob,
  type FlowEvent,
  type FlowState,
  type FlowTimeouts,
  type Journal,
  type JobState,
  type Transition,
} from "../../shared/flow/index.js";
import type { FlowEffect } from "../../shared/flow/index.js";
import type { Log } from "../../shared/model/index.js";
import { callRedis, ConflictError, deadlineMember, jobRecord, NotFoundError, planCommit, type CommitStep, type Store } from "../../shared/store/index.js";
import { toProblem } from "../api/errors.js";
import { Problem, problemData, type Outcome } from "../api/problem.js";
import { storeFor } from "../api/store.js";
import type { Env } from "../env.js";
import { NonceLedger } from "./nonces.js";
import { Outbox } from "./outbox.js";
import { releaseRunner } from "./relay.js";
import type { FlowScope } from "./scope.js";
import { flowView, type FlowView } from "./view.js";

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

interface Pending {
  event: FlowEvent;
  logs?: { job: number; lines: Log[] };
  resolve: (t: Transition) => void;
  reject: (error: unknown) => void;
}

/** How soon an alarm that could not act (storage away) tries again. */
const ALARM_RETRY_MS = 5_000;

/**
 * FlowCoordinator: one per flow (or per job run outside a flow). It owns the flow's state
 * machine and serializes its transitions: events queue while a storage write is in flight and
 * are then written together (group commit), so two transitions never overlap. Each batch is one
 * `commitFlow` script (state + the messages it produces: the outbox); transient facts (delivery,
 * started, heartbeats, deadlines) are journalled in this object's storage. After eviction it
 * rebuilds from Redis plus that journal. Its alarm holds the flow's nearest deadline.
 */
export class FlowCoordinator extends DurableObject<Env> {
  private scope: FlowScope | undefined;
  /** undefined: not loaded yet; null: no such flow. */
  private state: FlowState | null | undefined;
  private queue: Pending[] = [];
  private draining = false;
  private readonly outbox = new Outbox(
    this.env,
    () => this.scope as FlowScope,
    () => this.store(),
    (event) => this.enqueue(event),
    () => this.armAlarm(),
  );
  private readonly nonces = new NonceLedger(this.ctx.storage);

  // RPC methods, called by the Worker's routes, the relay and the supervisor.

  /** Creates the flow (idempotent: an existing flow is returned as it is) and maybe starts it. */
  async create(scope: FlowScope, input: CreateFlowInput): Promise<Outcome<FlowView>> {
    return this.guard(scope, async () => {
      if (!this.state) {
        const state = newFlowState({
          id: scope.flowId,
          contextId: scope.contextId,
          callerId: input.callerId,
          envVars: input.envVars,
          timeouts: input.timeouts,
          traceId: input.traceId,
          jobs: input.jobs,
          messageBase: input.messageBase,
        });
        const created = await this.persistNew(state, input.chosen);
        this.state = created ? state : undefined;
        if (!created) await this.load();
      }
      if (input.start && this.state?.status === "dispatched") await this.enqueue({ type: "start", at: Date.now() });
      return flowView(this.current());
    });
  }

  /** Starts the flow; starting a started flow changes nothing. */
  async start(scope: FlowScope): Promise<Outcome<FlowView>> {
    return this.guard(scope, async () => {
      this.current();
      await this.enqueue({ type: "start", at: Date.now() });
      return flowView(this.current());
    });
  }

  /**
   * Cancels the flow: nothing more is dispatched, what is not ended errors as cancelled, and the
   * runners of attempts in flight are told to stop. Cancelling twice changes nothing.
   */
  async cancel(scope: FlowScope, reason: string): Promise<Outcome<FlowView>> {
    return this.guard(scope, async () => {
      this.current();
      await this.enqueue({ type: "cancel", reason, at: Date.now() });
      return flowView(this.current());
    });
  }

  /**
   * Runs a failed flow again from its failed jobs (finished jobs keep their results). Each
   * failed job gets fresh retries and a fresh block of message ids, allocated here.
   */
  async rerun(scope: FlowScope): Promise<Outcome<FlowView>> {
    return this.guard(scope, async () => {
      const state = this.current();
      if (state.status !== "error") throw new Problem(409, "conflict", "Conflict", `only a failed flow can be re-run; flow ${state.id} is ${state.status}`);
      const failed = state.order.filter((id) => (state.jobs[id] as JobState).status === "error");
      const sizes = failed.map((id) => (state.jobs[id] as JobState).spec.retries + 1);
      const total = sizes.reduce((a, b) => a + b, 0) + 1; // and a new result message
      const store = this.store();
      const last = Number(await callRedis(() => store.redis.exec<number>(["HINCRBY", store.keys.ids(state.contextId), `message:${state.callerId}`, String(total)])));
      const bases: Record<number, number> = {};
      let next = last - total + 1;
      failed.forEach((id, i) => {
        bases[id] = next;
        next += sizes[i] as number;
      });
      const t = await this.enqueue({ type: "rerun", bases, at: Date.now() });
      if (t.outcome !== "applied") throw new Problem(409, "conflict", "Conflict", t.reason ?? "the flow could not be re-run");
      return flowView(this.current());
    });
  }

  /** The flow with every job's live status, or null when there is no such flow. */
  async view(scope: FlowScope): Promise<Outcome<FlowView | null>> {
    return this.guard(scope, async () => (this.state ? flowView(this.state) : null));
  }

  /**
   * Applies an event from a runner (with its signature's nonce, refused when replayed) or from
   * the relay. Resolves once the transition is durable.
   */
  async handle(scope: FlowScope, event: FlowEvent, extra: { nonce?: { keyid: string; value: string; ttlMs: number }; logs?: Log[] } = {}): Promise<Outcome<EventAnswer>> {
    return this.guard(scope, () => this.handleEvent(event, extra));
  }

  private async handleEvent(event: FlowEvent, extra: { nonce?: { keyid: string; value: string; ttlMs: number }; logs?: Log[] }): Promise<EventAnswer> {
    const state = this.current();
    if (extra.nonce && !(await this.nonces.use(extra.nonce.keyid, extra.nonce.value, extra.nonce.ttlMs))) {
      return { outcome: "replayed", reason: "this nonce was already used: sign every request with a new nonce" };
    }
    const logs = extra.logs && "job" in event ? { job: event.job, lines: extra.logs } : undefined;
    // The jitter of a retry's backoff is chosen here, so the machine stays pure.
    const t = await this.enqueue(event.type === "failed" ? { ...event, random: Math.random() } : event, logs);
    const job = "job" in event ? (t.state.jobs[event.job] ?? state.jobs[event.job]) : undefined;
    return { outcome: t.outcome, ...(t.reason ? { reason: t.reason } : {}), ...(job ? { status: job.status } : {}), origin: this.scope?.origin ?? "" };
  }

  /** The supervisor's poke: act on due deadlines, retry relaying, refresh the deadline entry. */
  async tick(scope: FlowScope): Promise<Outcome<null>> {
    return this.guard(scope, async () => {
      await this.refresh();
      return null;
    });
  }

  private async refresh(): Promise<void> {
    await this.actOnDeadlines();
    const state = this.state;
    if (!state) return;
    const store = this.store();
    const member = deadlineMember(state);
    const due = nearestDeadline(state);
    await callRedis(() =>
      due && state.endedAt === undefined
        ? store.redis.exec(["ZADD", store.keys.deadlines(state.contextId), String(due.at), member])
        : store.redis.exec(["ZREM", store.keys.deadlines(state.contextId), member]),
    );
  }

  override async alarm(): Promise<void> {
    // A fresh instance can be woken by its alarm before any call told it its scope.
    this.scope ??= await this.ctx.storage.get<FlowScope>("scope");
    if (!this.scope) return;
    await this.load();
    await this.actOnDeadlines();
  }

  // Internals.

  /** Binds and loads, runs `work`, and turns any failure into a problem the caller can rethrow. */
  private async guard<T>(scope: FlowScope, work: () => Promise<T>): Promise<Outcome<T>> {
    try {
      await this.bind(scope);
      await this.load();
      return { ok: await work() };
    } catch (error) {
      const problem = toProblem(error);
      if (problem.status === 500) console.error("FlowCoordinator:", error);
      return { problem: problemData(problem) };
    }
  }

  private async bind(scope: FlowScope): Promise<void> {
    if (this.scope) return;
    const stored = await this.ctx.storage.get<FlowScope>("scope");
    this.scope = stored ?? scope;
    if (!stored) await this.ctx.storage.put("scope", scope);
  }

  private store(): Store {
    const scope = this.scope as FlowScope;
    return storeFor({ ...this.env, KEY_PREFIX: scope.prefix });
  }

  private current(): FlowState {
    if (!this.state) throw new NotFoundError("flow", String(this.scope?.flowId));
    return this.state;
  }

  /** Loads the state once per instance: from Redis, plus the journal of this object's storage. */
  private async load(): Promise<void> {
    if (this.state !== undefined) return;
    await this.ctx.blockConcurrencyWhile(async () => {
      if (this.state !== undefined) return;
      const scope = this.scope as FlowScope;
      const store = this.store();
      const journal = (await this.ctx.storage.get<Journal>("journal")) ?? {};
      if (scope.job) {
        const { jobs, messages } = await store.flowStore.loadJobs(scope.contextId, scope.job.callerId, [scope.job.id]);
        this.state = jobs.length === 0 ? null : rebuildState({ flow: null, contextId: scope.contextId, callerId: scope.job.callerId, jobs, messages, journal });
        return;
      }
      const stored = await store.flowStore.load(scope.contextId, scope.flowId);
      this.state = stored?.flow
        ? rebuildState({ flow: stored.flow, contextId: scope.contextId, callerId: stored.flow.caller_id, jobs: stored.jobs, messages: stored.messages, journal })
        : null;
    });
  }

  private async persistNew(state: FlowState, chosen: number[]): Promise<boolean> {
    const store = this.store();
    if (!this.scope?.job) return store.flowStore.create(state, chosen, Date.now());
    try {
      const { created_at: _c, updated_at: _u, ...record } = jobRecord(state, state.jobs[state.order[0] as number] as JobState, Date.now());
      await store.jobs.create(record);
      return true;
    } catch (error) {
      if (error instanceof ConflictError && chosen.length === 0) return false;
      throw error;
    }
  }

  private enqueue(event: FlowEvent, logs?: Pending["logs"]): Promise<Transition> {
    return new Promise((resolve, reject) => {
      this.queue.push({ event, ...(logs ? { logs } : {}), resolve, reject });
      void this.drain();
    });
  }

  /**
   * Applies queued events in order and writes the batch in one script. While the write is in
   * flight, new events queue up for the next batch. A failed write leaves the state as it was
   * and fails the batch's callers (they retry).
   */
  private async drain(): Promise<void> {
    if (this.draining) return;
    this.draining = true;
    try {
      while (this.queue.length > 0) {
        const batch = this.queue.splice(0);
        let state = this.current();
        const steps: CommitStep[] = [];
        const transitions = batch.map((item) => {
          const t = apply(state, item.event);
          if (t.outcome === "applied") {
            state = t.state;
            steps.push({ state, effects: t.effects, ...(item.logs ? { logs: item.logs } : {}) });
          }
          return t;
        });
        try {
          await this.commit(steps, state);
        } catch (error) {
          for (const item of batch) item.reject(error);
          continue;
        }
        batch.forEach((item, i) => item.resolve(transitions[i] as Transition));
      }
    } finally {
      this.draining = false;
    }
  }

  private async commit(steps: CommitStep[], next: FlowState): Promise<void> {
    if (steps.length === 0) return;
    const store = this.store();
    const now = Date.now();
    const plan = planCommit(store.keys, steps, now);
    const skipped = await store.flowStore.commit(plan);
    if (skipped.length > 0) {
      // Redis already holds some of these transitions: this instance's memory was behind.
      this.state = undefined;
      await this.load();
      return;
    }
    const before = this.state as FlowState;
    this.state = next;
    await this.ctx.storage.put("journal", journalOf(next));
    for (const step of steps) {
      for (const effect of step.effects) {
        // The runner that held an attempt has a slot free again (for the relay's capacity count).
        if (effect.type === "jobEnded") {
          const delivery = (step.state.jobs[effect.job] as JobState).delivery;
          if (delivery && before.jobs[effect.job]?.status !== "finished") releaseRunner(next.contextId, delivery.runnerId);
        }
        if (effect.type === "attemptFailed") {
          const previous = (step.state.jobs[effect.job] as JobState).previousRunner;
          if (previous !== undefined) releaseRunner(next.contextId, previous);
        }
        if (effect.type === "flowStarted") {
          const due = nearestDeadline(next);
          if (due) await callRedis(() => store.redis.exec(["ZADD", store.keys.sweepDue(), "LT", String(due.at), String(next.contextId)]));
        }
      }
    }
    await this.armAlarm();
    if (plan.messages.length > 0) void this.outbox.relay(next.contextId, plan.messages);
    const cancels = steps.flatMap((step) => step.effects.filter((e): e is Extract<FlowEffect, { type: "cancelJob" }> => e.type === "cancelJob"));
    if (cancels.length > 0) void this.outbox.cancelAtRunners(next, cancels);
  }

  private async actOnDeadlines(): Promise<void> {
    const state = this.state;
    if (!state) return;
    const now = Date.now();
    let failed = false;
    let paused: boolean | undefined;
    for (const id of state.order) {
      const due = (state.jobs[id] as JobState).deadline;
      if (!due || due.at > now) continue;
      try {
        // A message waits in msg_out while its context is paused: its delivery clock waits too.
        if (due.kind === "delivery") paused ??= await this.store().contextAdmin.isPaused(state.contextId);
        const event: FlowEvent = paused && due.kind === "delivery"
          ? { type: "postponed", job: id, attempt: due.attempt, kind: due.kind, until: now + state.timeouts.timeout * 1000, at: now }
          : { type: "deadline", job: id, attempt: due.attempt, kind: due.kind, at: now, random: Math.random() };
        await this.enqueue(event);
      } catch {
        failed = true; // storage away: try again shortly
      }
    }
    if (failed) {
      await this.ctx.storage.setAlarm(now + ALARM_RETRY_MS);
      return;
    }
    if (this.outbox.retryDue(now)) await this.outbox.relay(state.contextId, []);
    await this.armAlarm();
  }

  private async armAlarm(): Promise<void> {
    const due = this.state ? nearestDeadline(this.state) : undefined;
    const times = [due?.at, this.outbox.retryAt].filter((t): t is number => t !== undefined);
    if (times.length === 0) await this.ctx.storage.deleteAlarm();
    else await this.ctx.storage.setAlarm(Math.min(...times));
  }
}
