import { dispatchScopeOf, type FlowScope } from "../core/scopes.js";
import { feedStub } from "../core/stubs.js";
import type { Env } from "../core/env.js";
import type { FlowBinding } from "./binding.js";
import type { FlowStream } from "./stream.js";

/** The storage key of the last event the context's feed has taken. */
const FED = "fed";

/**
 * Forwards the flow's own events (`flow.*`) to its context's feed, at least once: a cursor in
 * the object's storage says how far the feed has them, and what is not forwarded yet is sent
 * again on the next commit or alarm (the feed skips what it has). Each batch names the flow's
 * incarnation, so the feed tells another flow under the same id (whose events start at 1 again)
 * from a repeat.
 */
export class FeedRelay {
  private fed: number | undefined;
  /** The forward `later` runs, and whether another is wanted after it. */
  private running: Promise<void> | undefined;
  private again = false;

  constructor(
    private readonly env: Env,
    private readonly storage: DurableObjectStorage,
    private readonly stream: FlowStream,
    /** Whose incarnation token names the flow whose events these are. */
    private readonly binding: Pick<FlowBinding, "incarnation">,
  ) {}

  /** Forgets its cursor (after the object's storage was wiped). */
  forget(): void {
    this.fed = undefined;
  }

  /**
   * Forwards in the background, one forward at a time (events that come meanwhile go with the
   * next): a commit's effects need not wait for the feed. `failed` is told when one could not
   * forward, to arrange another try soon.
   */
  later(scope: FlowScope, failed: () => void): void {
    if (this.running) {
      this.again = true;
      return;
    }
    this.running = (async () => {
      do {
        this.again = false;
        if (!(await this.forward(scope).catch(() => false))) failed();
      } while (this.again);
    })().finally(() => (this.running = undefined));
  }

  /** Sends what the feed lacks; false if it could not (the caller arranges to try again soon). */
  async forward(scope: FlowScope): Promise<boolean> {
    // A job outside any flow has no place in the context's list of flows.
    if (scope.job || scope.flowId === 0) return true;
    this.fed ??= (await this.storage.get<number>(FED)) ?? 0;
    if (this.fed >= this.stream.lastFlowSeq()) return true;
    const events = this.stream.after(this.fed, true);
    if (events.length === 0) return true;
    try {
      await feedStub(this.env, dispatchScopeOf(scope)).publish(
        dispatchScopeOf(scope),
        scope.flowId,
        events,
        this.binding.incarnation,
      );
    } catch (error) {
      console.warn(`flow ${scope.flowId}: the context's feed is out of reach: ${(error as Error).message}`);
      return false;
    }
    this.fed = events.at(-1)?.seq ?? this.fed;
    await this.storage.put(FED, this.fed);
    return true;
  }
}

/**
 * Has the context's feed forget the flow's cursor. Best effort: a row left behind is a few bytes,
 * and the context's deletion drops the feed's storage whole.
 */
export async function forgetInFeed(env: Env, scope: FlowScope): Promise<void> {
  if (scope.job || scope.flowId === 0) return;
  try {
    await feedStub(env, dispatchScopeOf(scope)).forget(dispatchScopeOf(scope), scope.flowId);
  } catch (error) {
    console.warn(`flow ${scope.flowId}: the feed did not forget it: ${(error as Error).message}`);
  }
}
