import { messageId, type FlowEffect, type FlowState } from "../../shared/flow/index.js";
import type { Runner } from "../../shared/model/index.js";
import { WAITING_NONE, type CommitOutcome, type CommitPlan, type Store } from "../../shared/store/index.js";
import { mergeWakes, type Wake } from "../core/contracts.js";
import { readDeliveryTimeoutMs } from "../core/config.js";
import { coordinatorKeys } from "../core/coordinator-key.js";
import type { Env } from "../core/env.js";
import { dispatchScopeOf, type FlowScope } from "../core/scopes.js";
import { wakeDispatcher } from "../core/stubs.js";
import { cancelAtRunner } from "./delivery.js";
import type { Committed } from "./group-commit.js";
import type { PendingCommit } from "./pending.js";

const OWED = "owed-wake";

/** What carrying out a batch's effects needs of the flow's object (FlowObject implements it). */
export interface EffectsHost {
  scope(): FlowScope;
  store(): Store;
  /** Of the items a commit released, those the dispatcher delivered (the rest were the flow's own claims). */
  dispatched(items: readonly string[]): string[];
}

/**
 * What a flow owes the world once a batch is durable, besides what the batch's own script wrote:
 * the context's dispatcher is woken when attempts were queued, slots freed or a flow's result
 * left on msg_out for its relay to POST to the caller's https addresses (a caller without any
 * finds the result in its inbox, written by the commit itself, and nothing is woken for it);
 * the wake is kept as owed, durably, until it went through (the supervisor's sweep learns when
 * the flow's deadlines start from the commit itself, see planCommit); runners are told to stop
 * cancelled attempts (best effort: a runner that misses it learns on its next report, answered 409).
 */
export class FlowEffects {
  constructor(
    private readonly env: Env,
    private readonly storage: DurableObjectStorage,
    private readonly host: EffectsHost,
  ) {}

  /** Carries out what a durable batch owes; false when a wake stays owed (the alarm should come soon). */
  async committed(batch: Committed): Promise<boolean> {
    const woken = batch.plan ? await this.wake(this.wakeAfter(batch.plan, batch.outcome)) : true;
    for (const step of batch.steps) {
      // A flow that ended without ever starting (cancelled first) never made its context due:
      // the sweep looks within a minute, and keeps it for its retention window from then on.
      if (step.effects.some((e) => e.type === "flowEnded") && step.state.startedAt === undefined)
        await this.host.store().sweep.dueSoon(step.state.contextId);
    }
    const cancels = batch.steps.flatMap((step) =>
      step.effects.filter((e): e is Extract<FlowEffect, { type: "cancelJob" }> => e.type === "cancelJob"),
    );
    if (cancels.length > 0) void this.cancelAtRunners(batch.after, cancels);
    return woken;
  }

  /**
   * A plan run again after an unknown outcome owes its wake again (and a look at claims left
   * unsettled, if it went out with claims); false when it stays owed.
   */
  async resolved(plan: PendingCommit): Promise<boolean> {
    return this.wake(mergeWakes(wakeFor(plan), plan.claimed ? { reap: true } : undefined));
  }

  /**
   * The wake a durable commit owes, less what its own claims made needless: a queue they ran
   * empty, a freed slot they took again (the runner is full), and, while no flow's queue waits in
   * the dispatcher's ring, every freed slot (there is nothing to give it to; work queued after
   * this brings its own wake). Released items it names only when the dispatcher delivered them.
   */
  private wakeAfter(plan: CommitPlan, outcome: CommitOutcome | undefined): Wake | undefined {
    const released = this.host.dispatched(plan.released ?? []);
    if (!outcome || outcome.waiting === undefined) return wakeFor({ ...plan, released });
    const drained = new Set(outcome.claimed.filter((c) => c.drained).map((c) => c.queue.key));
    const full = new Set(outcome.claimed.filter((c) => c.full).map((c) => c.runner.id));
    const idle = outcome.waiting === WAITING_NONE && released.length === 0;
    return wakeFor({
      ...plan,
      queued: plan.queued.filter((q) => !drained.has(q.key)),
      freed: idle ? [] : plan.freed.filter((runner) => !full.has(runner)),
      released,
    });
  }

  /** Wakes the dispatcher; if that fails, the wake stays owed (the alarm tries again). True when nothing is owed. */
  async wake(wake: Wake | undefined): Promise<boolean> {
    const owed = await this.storage.get<Wake>(OWED);
    const all: Wake = mergeWakes(owed, wake);
    if (!all.work && !all.queues?.length && !all.mail && !all.freed?.length && !all.released?.length && !all.reap)
      return true;
    const scope = this.host.scope();
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

  /** Tells push runners to stop the attempts a cancel ended (pull runners hear it as a 409). */
  private async cancelAtRunners(
    state: FlowState,
    cancels: Extract<FlowEffect, { type: "cancelJob" }>[],
  ): Promise<void> {
    try {
      const runners = new Map<number, Runner>(
        (await this.host.store().runners.list({ context_id: state.contextId }, 0, 1000)).items.map((r) => [r.id, r]),
      );
      const { kid, key } = (await coordinatorKeys(this.env)).current;
      await Promise.all(
        cancels.map((c) => {
          const job = state.jobs.job(c.job);
          const cancel = {
            context_id: state.contextId,
            flow_id: state.id,
            job_id: c.job,
            attempt: c.attempt,
            caller_id: state.callerId,
            message_id: messageId(job, c.attempt),
            reason: c.reason,
          };
          const address = runners.get(c.runner)?.address ?? "";
          return cancelAtRunner(address, { cancel }, { keyid: kid, key }, readDeliveryTimeoutMs(this.env));
        }),
      );
    } catch (error) {
      console.warn(`cancelling at runners failed: ${(error as Error).message}`);
    }
  }
}

function wakeFor(plan: Pick<PendingCommit, "queued" | "freed" | "released" | "notifies">): Wake | undefined {
  const queues = plan.queued;
  if (queues.length === 0 && plan.freed.length === 0 && !plan.released?.length && !plan.notifies) return undefined;
  return {
    ...(queues.length > 0 ? { queues } : {}),
    ...(plan.freed.length > 0 ? { freed: plan.freed } : {}),
    ...(plan.released?.length ? { released: plan.released } : {}),
    ...(plan.notifies ? { mail: true } : {}),
  };
}
