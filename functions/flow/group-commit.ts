import { apply, type FlowEvent, type FlowState, type Journal, type Transition } from "../../shared/flow/index.js";
import { changesOf, type FlowChange } from "../../shared/flow/changes.js";
import {
  CALL_BYTES,
  callBytes,
  ConflictError,
  NotFoundError,
  planCommit,
  RedisCommandError,
  type CommitClaim,
  type CommitOutcome,
  type CommitPlan,
  type ClaimsOfCommit,
  type CommitStep,
  type Store,
} from "../../shared/store/index.js";
import { nextBatch, type Queued, type Unborn } from "./batch.js";
import { FlowJournal } from "./journal.js";
import { PendingCommits, type PendingCommit } from "./pending.js";
import { RecordSeen } from "./record-seen.js";

/** A batch that is durable now: the states around it, its steps, and the plan written (if any). */
export interface Committed {
  before: FlowState;
  /** The state after the batch; memory holds it, unless `conflict`. */
  after: FlowState;
  steps: CommitStep[];
  /** The script call, when the batch wrote to Redis (journal-only batches write none). */
  plan: CommitPlan | undefined;
  /** The claims the call made for the flow's own work (none when it wrote nothing), and what they did. */
  claims: CommitClaim[];
  outcome: CommitOutcome | undefined;
  /**
   * Redis already held some of the batch (memory was behind storage): Redis has the truth, and
   * the state is read again before the next batch.
   */
  conflict: boolean;
}

/**
 * What the flow's object provides the writer and carries out for it (FlowObject, flow-object.ts,
 * implements it; the tests give recording stand-ins).
 */
export interface CommitHost {
  readonly storage: DurableObjectStorage;
  store(): Store;
  /** Reads the flow from Redis plus the journal; null when there is no such flow. */
  rebuild(journal: Journal): Promise<FlowState | null>;
  /**
   * Whether a commit plan left pending belongs to the flow in Redis (not to another incarnation
   * under the same id); if not, the host wiped its storage, the plan with it. Without it, every
   * plan is the flow's.
   */
  ownsPending?(): Promise<boolean>;
  /**
   * The flow's hash and the incarnation token a commit must find there to write (Redis wiped or
   * replaced, or the flow deleted: the commit writes nothing and fails with NotFoundError);
   * undefined while none is known. Asked at most once per REVOCATION_CHECK_MS of commits (one
   * command in the commit's script), and on the first commit after memory was forgotten.
   */
  record?(): { key: string; token: string } | undefined;
  /** The changes of a durable batch, for the flow's event stream. */
  publish(state: FlowState, changes: FlowChange[]): void;
  /** The state was read back from storage: the stream catches up with it. */
  reloaded(state: FlowState): void;
  /**
   * The work a commit of `state` may claim for the flow in its own script call (`commit` the plan
   * without them); none when absent. The claims are never part of a pending plan.
   */
  claims?(state: FlowState, commit: CommitPlan): CommitClaim[];
  /** A commit that claims goes out next: should the object die before delivering, its alarm must come back. */
  claiming?(): Promise<void>;
  /** The assignments of what a commit claimed, applied in the same batch as the commit. */
  assignments?(outcome: CommitOutcome): FlowEvent[];
  /**
   * What a batch will owe that must survive the object (its cancels of child flows), made durable
   * before its commit goes out: the commit's outcome may be unknown (no afterCommit), or the
   * object may die before carrying it out.
   */
  beforeCommit?(steps: CommitStep[]): Promise<void>;
  /** Carries out what a durable batch owes: waking dispatch, cancels, the alarm. */
  afterCommit(batch: Committed): Promise<void>;
  /** A plan left pending was run again and is now known to be applied: what it owed dispatch is owed again. */
  afterSettle(plan: PendingCommit): Promise<void>;
  /** A storage call had no known outcome: storage is away. */
  storageDown(): Promise<void>;
  /** A storage call came back (called inside a batch: must not wait for another batch). */
  storageUp(): void;
}

/**
 * The flow's state and the one writer of it. Events queue while a write is in flight and are
 * then applied and written together (group commit), so two transitions never overlap, and a
 * batch is one `commitFlow` script (the state it reached and the messages it created).
 *
 * Memory is a cache of what is durable. The rule for the third outcome of a storage call: when
 * a commit's outcome is unknown, the batch's callers are failed (they retry), the plan stays
 * pending (see PendingCommits) and memory is forgotten; the next use first runs the pending plan
 * again until its outcome is known, then reads the state back from Redis and the journal. A
 * retried event then finds its transition applied (a duplicate) or applies it, and the effects
 * the transition owed are carried out by whoever settles the plan.
 */
export class GroupCommit {
  private state: FlowState | null | undefined;
  private loading: Promise<void> | undefined;
  private queue: Queued[] = [];
  private draining = false;
  /** Who waits for the queue to be drained (quiet). */
  private drained: (() => void)[] = [];
  /** The last commit or settlement: the next one starts after it. */
  private writing: Promise<unknown> = Promise.resolve();
  /** The write-ahead record of the commit under way (a part that forgets its table on a wipe). */
  readonly pending: PendingCommits;
  private readonly journal: FlowJournal;
  /**
   * Bumped whenever memory is set or forgotten here: a read from storage begun before does not
   * overwrite what a commit set meanwhile (it would take memory back to an older state).
   */
  private generation = 0;
  /** When the record was last seen to be the flow's: a commit checks it again (`record`) when stale. */
  readonly seen = new RecordSeen();

  constructor(private readonly host: CommitHost) {
    this.pending = new PendingCommits(host.storage);
    this.journal = new FlowJournal(host.storage);
  }

  /** The state as committed: undefined until loaded (or after an unknown outcome), null when there is no such flow. */
  get current(): FlowState | null | undefined {
    return this.state;
  }

  /** Whether events are queued or a batch is being written: memory may be about to change. */
  get busy(): boolean {
    return this.draining || this.queue.length > 0;
  }

  /** Loads the state unless memory holds it, settling a pending plan first. Throws while storage is away. */
  async load(): Promise<FlowState | null> {
    // A read whose answer came after memory was forgotten again is read once more.
    for (let tries = 0; this.state === undefined && tries < 3; tries++) {
      // Not blockConcurrencyWhile: a failure there resets the whole object (and answers 500).
      this.loading ??= this.loadNow().finally(() => (this.loading = undefined));
      await this.loading;
    }
    if (this.state === undefined) throw new Error("the flow's state changed while it was read: try again");
    return this.state;
  }

  private async loadNow(): Promise<void> {
    await this.settlePending();
    const generation = this.generation;
    const readAt = Date.now();
    const state = await this.host.rebuild(await this.journal.read());
    this.seen.seenAt(readAt);
    this.host.storageUp();
    // A commit (or a creation) that set memory meanwhile knows better than this read.
    if (generation !== this.generation) return;
    this.state = state;
    if (state) this.host.reloaded(state);
  }

  /** Sets memory (see `generation`); memory forgotten is checked against its record again. */
  private remember(state: FlowState | null | undefined): void {
    this.state = state;
    this.generation++;
    if (state === undefined) this.seen.lost();
  }

  /**
   * Runs a plan left pending again until its outcome is known; true if there was one. It takes
   * turns with commits: run beside a batch in flight, it would clear that batch's plan (which may
   * have no known outcome yet) or make the batch's own call find its sections written.
   */
  settlePending(): Promise<boolean> {
    return this.exclusive(async () => {
      const plan = await this.pending.read();
      if (!plan) return false;
      // A creation's script tells another flow under the id itself; a commit's would write into it.
      if (!plan.creates && this.host.ownsPending && !(await this.host.ownsPending())) return true;
      try {
        await this.run(plan);
      } catch (error) {
        // A creation that found another flow under its id, or a commit its flow gone, wrote
        // nothing and owes nothing.
        if (!(error instanceof ConflictError || error instanceof NotFoundError)) throw error;
        await this.pending.clear();
        return true;
      }
      await this.host.afterSettle(plan);
      await this.pending.clear();
      return true;
    });
  }

  /**
   * Runs `work` once every event queued so far is committed, and no commit or settlement runs
   * beside it (the flow's removal: nothing may write after it decided). The caller keeps new
   * events out meanwhile (blockConcurrencyWhile).
   */
  async quiet<T>(work: () => Promise<T>): Promise<T> {
    while (this.draining) await new Promise<void>((resolve) => this.drained.push(resolve));
    return this.exclusive(work);
  }

  /** Runs `work` when no other commit or settlement runs: one plan is pending at a time. */
  private exclusive<T>(work: () => Promise<T>): Promise<T> {
    const turn = this.writing.then(work, work);
    this.writing = turn.catch(() => undefined);
    return turn;
  }

  /** Takes a state that was just created in storage as the current one. */
  adopt(state: FlowState): void {
    this.remember(state);
  }

  /**
   * Stores a flow that is not in storage yet together with the transition of `event` (its
   * start), in one script call, with `token` as its incarnation: resolves as `enqueue` does.
   * Rejects with ConflictError (kind "flow") when another flow holds the id, or "job" when a
   * chosen job id is taken: nothing was written then, and memory is forgotten.
   */
  createWith(
    state: FlowState,
    chosen: number[],
    created: FlowChange,
    event: FlowEvent,
    token: string = crypto.randomUUID(),
  ): Promise<Transition> {
    return this.enqueue(event, undefined, { state, chosen, created, token });
  }

  /** Forgets memory: the next use reads the state back. */
  forget(): void {
    this.remember(undefined);
  }

  /** Applies an event in the next batch; resolves once the batch is durable. */
  enqueue(event: FlowEvent, logs?: Queued["logs"], unborn?: Unborn): Promise<Transition> {
    return new Promise((resolve, reject) => {
      this.queue.push({ event, ...(logs ? { logs } : {}), ...(unborn ? { unborn } : {}), resolve, reject });
      void this.drain();
    });
  }

  /** The flow a queued creation brings, if one waits in the queue. */
  private unbornQueued(): Unborn | undefined {
    return this.queue.find((item) => item.unborn)?.unborn;
  }

  private async drain(): Promise<void> {
    if (this.draining) return;
    this.draining = true;
    try {
      while (this.queue.length > 0) {
        let state: FlowState | null;
        try {
          state = this.unbornQueued()?.state ?? (await this.load());
          // A creation queued while the state was read brings its own.
          state = this.unbornQueued()?.state ?? state;
          if (!state) throw new NotFoundError("flow", "this");
        } catch (error) {
          for (const item of this.queue.splice(0)) item.reject(error);
          break;
        }
        const batch = nextBatch(this.queue);
        const unborn = batch.find((item) => item.unborn)?.unborn;
        let next = state;
        const steps: CommitStep[] = [];
        const changes: FlowChange[] = [];
        const transitions = batch.map((item) => {
          const t = apply(next, item.event);
          if (t.outcome === "applied") {
            changes.push(...changesOf(next, t, item.event, item.logs?.lines));
            next = t.state;
            steps.push({ state: next, effects: t.effects, ...(item.logs ? { logs: item.logs } : {}) });
          }
          return t;
        });
        try {
          await this.exclusive(() => this.commit(steps, state, next, changes, unborn));
        } catch (error) {
          for (const item of batch) item.reject(error);
          continue;
        }
        batch.forEach((item, i) => item.resolve(transitions[i] as Transition));
      }
    } finally {
      this.draining = false;
      for (const resolve of this.drained.splice(0)) resolve();
    }
  }

  private async commit(
    steps: CommitStep[],
    before: FlowState,
    after: FlowState,
    changes: FlowChange[],
    unborn: Unborn | undefined,
  ): Promise<void> {
    if (steps.length === 0 && !unborn) return;
    const now = Date.now();
    const store = this.host.store();
    // A creation goes in the commit's first call: the commit has the room it leaves there.
    const creation = unborn && store.flows.creation(unborn.state, unborn.chosen, now, undefined, unborn.token);
    const room = creation ? CALL_BYTES - callBytes(creation) : CALL_BYTES;
    const commit = planCommit(store.keys, steps, now, store.deadLetters.max, room);
    const plan: PendingCommit = creation ? { ...commit, ...store.flows.withCommit(creation, commit) } : commit;
    const writes = unborn !== undefined || commit.sections > 0;
    const claims = writes ? (this.host.claims?.(after, commit) ?? []) : [];
    let skipped: number[] = [];
    let outcome: CommitOutcome | undefined;
    await this.host.beforeCommit?.(steps);
    if (writes) {
      // A plan run again after an unknown outcome claims nothing: what it claimed the first time
      // (if it ran) is left to the dispatcher's reaper, which it is then told to run.
      await this.pending.write(claims.length > 0 ? { ...plan, claimed: true } : plan);
      if (claims.length > 0) await this.host.claiming?.();
      try {
        outcome = await this.run(plan, {
          contextId: after.contextId,
          flowId: after.id,
          claims,
          now,
          ...(unborn ? { commitKeys: commit.keys } : {}),
        });
        skipped = outcome.skipped;
      } catch (error) {
        this.remember(undefined);
        if (error instanceof RedisCommandError || error instanceof ConflictError || error instanceof NotFoundError) {
          // Redis refused the script (a bug, not an outage), the creation found its ids taken,
          // or the flow is gone from Redis (nothing written): running it again cannot help. The
          // next read finds the flow gone and wipes what the object keeps of it (incarnation.ts).
          await this.pending.clear();
        } else {
          await this.host.storageDown();
        }
        throw error;
      }
    }
    const conflict = skipped.length > 0;
    if (conflict) {
      // Which sections Redis had, and what each step did: what a state read back disagrees on.
      const did = steps.map((step) => step.effects.map((e) => e.type).join("+") || "journal only").join(", ");
      console.warn(
        `flow ${after.id} of context ${after.contextId}: storage held part of a batch already (sections ${skipped.join(", ")} of ${commit.sections}; steps: ${did}); reading it back`,
      );
      this.remember(undefined);
    } else {
      // The work the call claimed is assigned in this batch (journal and stream), not in one of its own.
      for (const event of outcome ? (this.host.assignments?.(outcome) ?? []) : []) {
        const t = apply(after, event);
        if (t.outcome !== "applied") continue;
        changes.push(...changesOf(after, t, event));
        after = t.state;
      }
      this.remember(after);
      // Told with the state that memory now holds (no await between): a view reads both together.
      // After a conflict the changes are not told from here: reading the state back catches up.
      this.host.publish(after, unborn ? [unborn.created, ...changes] : changes);
      await this.journal.write(before, after);
    }
    await this.host.afterCommit({
      before,
      after,
      steps,
      plan: writes ? commit : undefined,
      claims: writes ? claims : [],
      outcome,
      conflict,
    });
    if (writes) await this.pending.clear();
  }

  /** One call of the plan's script (with claims appended, the first time only); what it did. */
  private async run(plan: PendingCommit, claims?: ClaimsOfCommit): Promise<CommitOutcome> {
    // A creation's script tells another flow under the id by itself.
    const startedAt = Date.now();
    const check = !plan.creates && this.seen.stale(startedAt);
    const record = check ? this.host.record?.() : undefined;
    const outcome = await this.host.store().flows.commit(plan, claims, record);
    if (plan.creates || record) this.seen.seenAt(startedAt);
    this.host.storageUp();
    return outcome;
  }
}
