import { messageId, nearestDeadline, type FlowEffect, type FlowState, type JobState } from "../../shared/flow/index.js";
import type { Runner } from "../../shared/model/index.js";
import type { Store } from "../../shared/store/index.js";
import { mergeWakes, type Wake } from "../core/contracts.js";
import { coordinatorKeys } from "../core/coordinator-key.js";
import type { Env } from "../core/env.js";
import { dispatchScopeOf, type FlowScope } from "../core/scopes.js";
import { wakeDispatcher } from "../core/stubs.js";
import { cancelAtRunner } from "./delivery.js";
import type { Committed } from "./group-commit.js";
import type { PendingCommit } from "./pending.js";

const OWED = "owed-wake";

/**
 * What a flow owes the world once a batch is durable, besides what the batch's own script wrote:
 * the context's dispatcher is woken when attempts were queued, slots freed or a flow's result
 * left on msg_out for its relay to POST to the caller's https addresses (a caller without any
 * finds the result in its inbox, written by the commit itself, and nothing is woken for it);
 * the wake is kept as owed, durably, until it went through. The supervisor's sweep is told
 * when the flow's deadlines start (a start or a re-run); runners are told to stop cancelled
 * attempts (best effort: a runner that misses it learns on its next report, answered 409).
 */
export class FlowEffects {
  constructor(
    private readonly env: Env,
    private readonly storage: DurableObjectStorage,
    private readonly scope: () => FlowScope,
    private readonly store: () => Store,
  ) {}

  /** Carries out what a durable batch owes; false when a wake stays owed (the alarm should come soon). */
  async committed(batch: Committed): Promise<boolean> {
    const woken = batch.plan ? await this.wake(wakeFor(batch.plan)) : true;
    for (const step of batch.steps) {
      if (step.effects.some((e) => e.type === "flowStarted" || e.type === "flowRerun")) await this.sweepAt(batch.after);
      // A flow that ended without ever starting (cancelled first) never made its context due:
      // the sweep looks within a minute, and keeps it for its retention window from then on.
      if (step.effects.some((e) => e.type === "flowEnded") && step.state.startedAt === undefined)
        await this.store().sweep.dueSoon(step.state.contextId);
    }
    const cancels = batch.steps.flatMap((step) =>
      step.effects.filter((e): e is Extract<FlowEffect, { type: "cancelJob" }> => e.type === "cancelJob"),
    );
    if (cancels.length > 0) void this.cancelAtRunners(batch.after, cancels);
    return woken;
  }

  /** A plan run again after an unknown outcome owes its wake again; false when it stays owed. */
  async resolved(plan: PendingCommit): Promise<boolean> {
    return this.wake(wakeFor(plan));
  }

  /** Wakes the dispatcher; if that fails, the wake stays owed (the alarm tries again). True when nothing is owed. */
  async wake(wake: Wake | undefined): Promise<boolean> {
    const owed = await this.storage.get<Wake>(OWED);
    const all: Wake = mergeWakes(owed, wake);
    if (!all.work && !all.queues?.length && !all.mail && !all.freed?.length) return true;
    const scope = this.scope();
    try {
      await wakeDispatcher(this.env, dispatchScopeOf(scope), all);
      if (owed) await this.storage.delete(OWED);
      return true;
    } catch (error) {
      console.warn(
        `flow ${scope.flowId} of context ${scope.contextId}: waking the dispatcher failed: ${(error as Error).message}`,
      );
      await this.storage.put(OWED, all);
      return false;
    }
  }

  /** Tells the sweep to look at the context when the flow's nearest deadline comes. */
  private async sweepAt(state: FlowState): Promise<void> {
    const due = nearestDeadline(state);
    if (!due) return;
    // Best effort: the flow's own alarm is the first to act; the sweep is the backstop.
    await this.store()
      .sweep.dueBy(state.contextId, due.at)
      .catch(() => undefined);
  }

  /** Tells push runners to stop the attempts a cancel ended (pull runners hear it as a 409). */
  private async cancelAtRunners(
    state: FlowState,
    cancels: Extract<FlowEffect, { type: "cancelJob" }>[],
  ): Promise<void> {
    try {
      const runners = new Map<number, Runner>(
        (await this.store().runners.list({ context_id: state.contextId }, 0, 1000)).items.map((r) => [r.id, r]),
      );
      const { kid, key } = (await coordinatorKeys(this.env)).current;
      await Promise.all(
        cancels.map((c) => {
          const job = state.jobs[c.job] as JobState;
          const cancel = {
            context_id: state.contextId,
            flow_id: state.id,
            job_id: c.job,
            attempt: c.attempt,
            caller_id: state.callerId,
            message_id: messageId(job, c.attempt),
            reason: c.reason,
          };
          return cancelAtRunner(runners.get(c.runner)?.address ?? "", { cancel }, { keyid: kid, key });
        }),
      );
    } catch (error) {
      console.warn(`cancelling at runners failed: ${(error as Error).message}`);
    }
  }
}

function wakeFor(plan: Pick<PendingCommit, "queued" | "freed" | "released" | "notifies">): Wake | undefined {
  // A plan written by an older version says only whether it queued anything.
  const queued: unknown = plan.queued;
  const queues = Array.isArray(queued) ? plan.queued : [];
  const work = queued === true;
  if (queues.length === 0 && !work && plan.freed.length === 0 && !plan.notifies) return undefined;
  return {
    ...(queues.length > 0 ? { queues } : {}),
    ...(work ? { work: true } : {}),
    ...(plan.freed.length > 0 ? { freed: plan.freed } : {}),
    ...(plan.released?.length ? { released: plan.released } : {}),
    ...(plan.notifies ? { mail: true } : {}),
  };
}
