import {
  ENDED,
  FLOW_ENDED,
  flowResult,
  type FlowEffect,
  type FlowEvent,
  type FlowState,
  type JobState,
  type Transition,
} from "../../shared/flow/index.js";
import type { FlowParent, FlowView } from "../../shared/model/index.js";
import { readConfig } from "../core/config.js";
import type { Env } from "../core/env.js";
import { toProblem } from "../core/errors.js";
import { unwrap } from "../core/problem.js";
import { scopeFor, type FlowScope } from "../core/scopes.js";
import { storeForPrefix } from "../core/store.js";
import { coordinatorStub } from "../core/stubs.js";
import type { CommitStep } from "../../shared/store/index.js";
import type { FlowCall } from "../service/call.js";
import { cancelFlow } from "../service/recovery.js";
import { startTemplate } from "../service/templates.js";
import type { Committed } from "./group-commit.js";

/** Cancels owed to children (a cancel that did not go through), by job: tried again by the alarm. */
const OWED = "owed-child-cancel:";

/** A start refused for a reason a retry does not change: the job fails with it (not retried). */
const REFUSED = new Set([400, 403, 404, 409, 422]);

type Supervise = Extract<FlowEffect, { type: "superviseChild" }>;
type CancelChild = Extract<FlowEffect, { type: "cancelChild" }>;

/** What looking after a flow's children needs of its object. */
export interface ChildrenHost {
  readonly env: Env;
  readonly storage: DurableObjectStorage;
  scope(): FlowScope;
  enqueue(event: FlowEvent): Promise<Transition>;
  /** The work keeps going after the call that caused it was answered. */
  later(work: Promise<unknown>): void;
  /** Has the alarm come back soon (something is owed). */
  retrySoon(): Promise<void>;
}

/**
 * The shell's part of child flows (the machine's is shared/flow/children.ts): starting a job's
 * child through the path every template start takes, as the flow's own caller, under the
 * Idempotency-Key `child:<flow>:<job>:<attempt>` (a start repeated after an eviction or an
 * unknown outcome finds the same child); reading a child to find its end; cancelling children
 * whose job ended without them; telling the parent, when this flow is a child, that it ended.
 * All of it at least once: what fails here is done again by the job's next deadline (a minute),
 * or, for a cancel, by the alarm: a batch's cancels are kept as owed in the object's storage
 * before its commit goes out (`owe`), and each is cleared once it went through, so a commit whose
 * outcome was unknown, or an object that died before the cancel went out, leaves it to the alarm
 * (which comes back soon while any is owed). The work runs one piece at a time, so a cancel
 * always comes after a start of the same object that went before it.
 */
export class ChildFlows {
  private chain: Promise<unknown> = Promise.resolve();
  /** Jobs whose child's cancel this object knows to be owed (in its storage), not yet gone through. */
  private readonly owed = new Set<number>();

  constructor(private readonly host: ChildrenHost) {}

  /**
   * Before a batch's commit: its cancels of children, kept as owed in the object's storage (one
   * write, only for a batch that has any). Without this, a commit whose outcome was unknown (the
   * event retried then finds the job ended: nothing is owed by it) or an object that died between
   * the commit and the cancel left the child running to its own end.
   */
  async owe(steps: CommitStep[]): Promise<void> {
    const entries: Record<string, CancelChild> = {};
    for (const step of steps)
      for (const effect of step.effects) if (effect.type === "cancelChild") entries[`${OWED}${effect.job}`] = effect;
    if (Object.keys(entries).length === 0) return;
    await this.host.storage.put(entries);
    for (const effect of Object.values(entries)) this.owed.add(effect.job);
  }

  /** Whether a cancel is owed that has not gone through yet: the alarm should come back soon. */
  owing(): boolean {
    return this.owed.size > 0;
  }

  /** What a durable batch owes children and parent. */
  committed(batch: Committed): void {
    for (const step of batch.steps)
      for (const effect of step.effects) {
        if (effect.type === "superviseChild") void this.queue(() => this.supervise(step.state, effect));
        else if (effect.type === "cancelChild") void this.queue(() => this.cancel(step.state, effect));
        else if (effect.type === "flowEnded" && step.state.parent) void this.queue(() => this.tellParent(step.state));
      }
  }

  /**
   * Cancels owed from before (the alarm's turn), judged on the flow's state as committed (`state`
   * gives it; undefined while a batch is in flight or memory was forgotten: they wait). One whose
   * job did not end at that attempt was owed by a commit that never took effect: it is dropped.
   * True when none is left owed.
   */
  async retryOwed(state: () => FlowState | undefined): Promise<boolean> {
    const owed = await this.host.storage.list<CancelChild>({ prefix: OWED });
    for (const [key, effect] of owed) {
      const now = state();
      if (!now) return false;
      const job = now.jobs.get(effect.job);
      if (job && job.attempt === effect.attempt && !ENDED.has(job.status)) {
        await this.host.storage.delete(key);
        this.owed.delete(effect.job);
        continue;
      }
      this.owed.add(effect.job);
      await this.queue(() => this.cancel(now, effect));
    }
    return (await this.host.storage.list({ prefix: OWED, limit: 1 })).size === 0;
  }

  private queue(work: () => Promise<void>): Promise<void> {
    const next = this.chain.then(work).catch((error) => console.warn(`child flows: ${(error as Error).message}`));
    this.chain = next;
    this.host.later(next);
    return next;
  }

  /** Starts the job's child (or finds the one started before), else reads it; its end is told to the job. */
  private async supervise(state: FlowState, effect: Supervise): Promise<void> {
    const job = state.jobs.job(effect.job);
    const spec = job.spec.flow;
    if (!spec) return;
    let view: FlowView | null;
    try {
      view =
        effect.child === undefined
          ? await this.start(state, job, effect.attempt)
          : unwrap(
              await coordinatorStub(this.host.env, this.childScope(state, effect.child)).view(
                this.childScope(state, effect.child),
              ),
            );
    } catch (error) {
      const problem = toProblem(error);
      if (effect.child !== undefined || !REFUSED.has(problem.status)) throw error; // the next deadline tries again
      const at = Date.now();
      await this.host.enqueue({
        type: "childRefused",
        job: job.id,
        attempt: effect.attempt,
        error: `${problem.title}: ${problem.detail ?? ""}`.trim(),
        at,
      });
      return;
    }
    if (!view) {
      // Removed (its retention ran out while nobody looked): the job cannot learn more.
      const error = "it no longer exists";
      await this.host.enqueue({
        type: "childEnded",
        job: job.id,
        attempt: effect.attempt,
        child: effect.child ?? 0,
        status: "error",
        error,
        at: Date.now(),
      });
      return;
    }
    if (effect.child === undefined) {
      const t = await this.host.enqueue({
        type: "childStarted",
        job: job.id,
        attempt: effect.attempt,
        child: view.id,
        at: Date.now(),
      });
      // The job ended meanwhile (its flow cancelled or failed): the child must not outlive it.
      if (t.outcome === "stale" || t.outcome === "not-applicable") {
        await this.cancel(state, {
          type: "cancelChild",
          job: job.id,
          attempt: effect.attempt,
          child: view.id,
          reason: t.reason ?? "its job ended",
        });
        return;
      }
    }
    // A child that unwound (compensated, compensation_failed) ended too: its job in error.
    if (FLOW_ENDED.has(view.status)) await this.host.enqueue(endedEvent(job.id, effect.attempt, view));
  }

  /** Starts the child as the flow's own caller would start the template (its permission, checks, limits). */
  private async start(state: FlowState, job: JobState, attempt: number): Promise<FlowView> {
    const spec = job.spec.flow as NonNullable<JobState["spec"]["flow"]>;
    const parent: FlowParent = { flow_id: state.id, job_id: job.id, attempt, depth: (state.parent?.depth ?? 0) + 1 };
    const start = {
      ...(spec.version !== undefined ? { version: spec.version } : {}),
      inputs: spec.inputs,
      start: true,
    };
    const call = this.callAs(state, job.id);
    const { view } = await startTemplate(
      call,
      state.contextId,
      spec.template,
      start,
      childKey(state.id, job.id, attempt),
      undefined,
      "flow",
      parent,
    );
    return view;
  }

  /**
   * Cancels a job's child: the one known, else the one its start reserved, if it got that far
   * (a start still to come finds its job ended and cancels what it made), with compensate: a
   * child with compensations unwinds. A child that ended already has nothing left to cancel. One
   * that could not be reached stays owed.
   */
  private async cancel(state: FlowState, effect: CancelChild): Promise<void> {
    const owedKey = `${OWED}${effect.job}`;
    try {
      const call = this.callAs(state, effect.job);
      const child =
        effect.child ??
        (await call.store.flows.reservedFlow(
          state.contextId,
          state.callerId,
          childKey(state.id, effect.job, effect.attempt),
        ));
      if (child !== undefined) {
        try {
          // With compensate: a child that is a saga unwinds what it did (a repeat changes nothing).
          const why = `its parent flow ${state.id} ended its job ${effect.job}: ${effect.reason}`;
          await cancelFlow(call, state.contextId, child, why, true);
        } catch (error) {
          const status = toProblem(error).status;
          if (status !== 404 && status !== 409) throw error; // gone, or ended: nothing to cancel
        }
      }
      await this.host.storage.delete(owedKey);
      this.owed.delete(effect.job);
    } catch (error) {
      await this.host.storage.put(owedKey, effect);
      this.owed.add(effect.job);
      await this.host.retrySoon();
      throw error;
    }
  }

  /** This flow is a child and ended: its parent's job ends with it (lost, the parent's next look finds it). */
  private async tellParent(state: FlowState): Promise<void> {
    const parent = state.parent as FlowParent;
    const scope = scopeFor(this.base(), state.contextId, { flowId: parent.flow_id });
    const event = {
      type: "childEnded" as const,
      job: parent.job_id,
      attempt: parent.attempt,
      child: state.id,
      status: state.status === "finished" ? ("finished" as const) : ("error" as const),
      ...(state.status === "finished"
        ? { result: flowResult(state) }
        : { error: state.error?.reason ?? "it ended in error" }),
      at: Date.now(),
    };
    unwrap(await coordinatorStub(this.host.env, scope).childEnded(scope, event));
  }

  /** A service call as the flow's caller, whose permission each start and cancel checks. */
  private callAs(state: FlowState, job: number): FlowCall {
    const scope = this.host.scope();
    return {
      store: storeForPrefix(this.host.env, scope.prefix),
      config: readConfig(this.host.env),
      principal: { kind: "actor", id: state.callerId },
      request: new Request(`${scope.origin}/v1/contexts/${state.contextId}/flows/${state.id}/jobs/${job}/child`, {
        method: "POST",
      }),
      body: new Uint8Array(0),
      env: this.host.env,
      origin: scope.origin,
      later: (work) => this.host.later(work),
    };
  }

  private base() {
    const { prefix, origin } = this.host.scope();
    return { prefix, origin };
  }

  private childScope(state: FlowState, child: number): FlowScope {
    return scopeFor(this.base(), state.contextId, { flowId: child });
  }
}

/** The Idempotency-Key a child-flow job's attempt starts its child under. */
export function childKey(flow: number, job: number, attempt: number): string {
  return `child:${flow}:${job}:${attempt}`;
}

/** The event a child's view that ended is to its parent's job. */
function endedEvent(job: number, attempt: number, view: FlowView): Extract<FlowEvent, { type: "childEnded" }> {
  const at = Date.now();
  return view.status === "finished"
    ? { type: "childEnded", job, attempt, child: view.id, status: "finished", result: view.result, at }
    : {
        type: "childEnded",
        job,
        attempt,
        child: view.id,
        status: "error",
        error: view.error?.reason ?? "it ended in error",
        at,
      };
}
