import { messageId, type FlowEffect, type FlowEvent, type FlowState, type JobState, type Transition } from "../../shared/flow/index.js";
import type { Message, Runner } from "../../shared/model/index.js";
import type { Store } from "../../shared/store/index.js";
import { coordinatorKeys } from "../coordinator-key.js";
import type { Env } from "../env.js";
import { cancelAtRunner } from "./delivery.js";
import { MessageOwners } from "./owners.js";
import { relay } from "./relay.js";
import type { FlowScope } from "./scope.js";

const RUNNER_CACHE_MS = 5_000;
const RELAY_RETRY_MIN_MS = 1_000;
const RELAY_RETRY_MAX_MS = 30_000;

/**
 * What a FlowCoordinator sends out once a transition is durable: its new messages, relayed at
 * once (what no runner takes now is retried with backoff, through the coordinator's alarm), and
 * cancels to the runners of attempts a cancel ended.
 */
export class Outbox {
  private runnerCache: { at: number; list: Runner[] } | undefined;
  private retryMs = 0;
  /** When relaying should be tried again (epoch ms), if something was left behind. */
  retryAt: number | undefined;

  constructor(
    private readonly env: Env,
    private readonly scope: () => FlowScope,
    private readonly store: () => Store,
    private readonly enqueue: (event: FlowEvent) => Promise<Transition>,
    private readonly rearm: () => Promise<void>,
  ) {}

  /** True (and forgets it) when a relay retry is due. */
  retryDue(now: number): boolean {
    if (this.retryAt === undefined || this.retryAt > now) return false;
    this.retryAt = undefined;
    return true;
  }

  /** Relays this flow's new messages (and whatever else waits in the context's msg_out). */
  async relay(contextId: number, messages: Message[]): Promise<void> {
    const store = this.store();
    const own = new Map(messages.map((m) => [store.keys.message(m.context_id, m.caller_id, m.id), m]));
    const owners = new MessageOwners(this.env, this.scope(), this.enqueue);
    try {
      const report = await relay(
        { store, key: (await coordinatorKeys(this.env)).current, runners: (ctx) => this.runners(ctx), owner: (message) => owners.for(message) },
        contextId,
        Math.max(own.size, 10),
        own,
      );
      if (report.back === 0) {
        this.retryMs = 0;
        return;
      }
    } catch (error) {
      console.warn(`relay in context ${contextId} failed: ${(error as Error).message}`);
    }
    this.retryMs = Math.min(RELAY_RETRY_MAX_MS, Math.max(RELAY_RETRY_MIN_MS, this.retryMs * 2));
    this.retryAt = Date.now() + this.retryMs;
    await this.rearm();
  }

  /** Tells push runners to stop the attempts a cancel ended (pull runners hear it as a 409). */
  async cancelAtRunners(state: FlowState, cancels: Extract<FlowEffect, { type: "cancelJob" }>[]): Promise<void> {
    try {
      const runners = await this.runners(state.contextId);
      const key = (await coordinatorKeys(this.env)).current;
      await Promise.all(
        cancels.map((c) => {
          const runner = runners.find((r) => r.id === c.runner);
          const job = state.jobs[c.job] as JobState;
          const cancel = { context_id: state.contextId, flow_id: state.id, job_id: c.job, attempt: c.attempt, caller_id: state.callerId, message_id: messageId(job, c.attempt), reason: c.reason };
          return runner ? cancelAtRunner(runner, { cancel }, key) : Promise.resolve(false);
        }),
      );
    } catch (error) {
      console.warn(`cancelling at runners failed: ${(error as Error).message}`);
    }
  }

  /** The context's runners, looked up at most every few seconds. */
  private async runners(contextId: number): Promise<Runner[]> {
    const now = Date.now();
    if (!this.runnerCache || now - this.runnerCache.at > RUNNER_CACHE_MS) {
      this.runnerCache = { at: now, list: (await this.store().runners.list({ context_id: contextId }, 0, 500)).items };
    }
    return this.runnerCache.list;
  }
}
