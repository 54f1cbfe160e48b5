import { DurableObject } from "cloudflare:workers";
import type { Claim } from "../../shared/store/index.js";
import type { DispatcherRpc, OwnerAnswer, WaitReason, Wake, Want } from "../core/contracts.js";
import type { Env } from "../core/env.js";
import type { DispatchScope } from "../core/scopes.js";
import { DispatchObject } from "./dispatch-object.js";
import { explainWait } from "./explain.js";

/**
 * Dispatcher: one per context, the one that keeps the context's ready work moving. Attempts wait
 * in Redis (one queue per flow and script type); which queues wait, and whose turn it is, is its
 * ring (ReadyRing, durable here). A runner's concurrency is its slot set in Redis, claimed in the
 * same step that takes the work, so the limit holds across every isolate. Its rounds
 * (DispatchRounds) claim, have owners deliver, and settle; runner backoff is kept durably here
 * (RunnerBackoff). Pull runners lease through it too, so they take their turns in the same order.
 *
 * It is woken when work is queued or slots are freed (by the commit that did it, which waits
 * for the wake to be durable), when messages for actors are posted, and when runners change. Its
 * alarm is the safety net: set before a round starts, so a round lost with its isolate runs
 * again, and set to the end of a runner's backoff while work waits for it. It also runs its
 * context's sweep when the cron asks (`sweep`), on the same alarm (context-sweep.ts). While
 * nothing can move, it costs nothing. This class is its RPC surface; DispatchObject
 * (dispatch-object.ts) composes its parts and holds the paths.
 */
export class Dispatcher extends DurableObject<Env> implements DispatcherRpc {
  /** The context's dispatcher object: its parts and the paths that move work. */
  private readonly dispatch = new DispatchObject(this.ctx, this.env);

  async wake(scope: DispatchScope, wake: Wake): Promise<void> {
    await this.dispatch.bind(scope);
    await this.dispatch.wake(wake);
  }

  async explain(scope: DispatchScope, wants: Want[]): Promise<WaitReason[]> {
    const d = this.dispatch;
    await d.bind(scope);
    // A context gone throws NotFoundError, which the flow's view answers as a 404 (the flow is
    // being removed with it): not "waiting for a runner".
    return explainWait(d.store(), scope.contextId, await d.runners(), await d.backoff.waiting(), wants);
  }

  async waiting(scope: DispatchScope): Promise<number> {
    await this.dispatch.bind(scope);
    return this.dispatch.store().dispatch.waiting(await this.dispatch.ring.keys());
  }

  async lease(scope: DispatchScope, runnerId: number, max: number): Promise<Claim[]> {
    const d = this.dispatch;
    await d.bind(scope);
    let runners = await d.runners();
    if (!runners.some((r) => r.id === runnerId)) {
      await d.runnerList.drop(); // registered a moment ago
      runners = await d.runners();
    }
    const runner = runners.find((r) => r.id === runnerId);
    if (!runner) return [];
    return d.rounds.claim(d.store(), [runner], runners, max);
  }

  async settleOwn(scope: DispatchScope, runnerId: number, items: string[], answers: OwnerAnswer[]): Promise<void> {
    await this.dispatch.bind(scope);
    const settled = answers.map((a) => (a.outcome === "failed" ? new Error(a.reason) : a));
    await this.dispatch.rounds.settleOwn(runnerId, items, settled);
  }

  async sweep(scope: DispatchScope): Promise<void> {
    await this.dispatch.bind(scope);
    await this.dispatch.sweep();
  }

  async purge(): Promise<void> {
    await this.dispatch.purge();
  }

  override async alarm(): Promise<void> {
    await this.dispatch.alarm();
  }
}
