import type { Message, Runner, ScriptType } from "../../shared/model/index.js";
import { callRedis, type Settlement, type Store } from "../../shared/store/index.js";
import type { CoordinatorKey } from "../coordinator-key.js";
import { deliverToActor } from "./actor-delivery.js";
import { callbacks, deliver, type DeliveryPayload } from "./delivery.js";

/** The Durable Object that owns a message's job, as the relay talks to it. */
export interface MessageOwner {
  /**
   * Records that this attempt goes to `runner`. Resolves with the URL under which the job's
   * webhooks live (its owner knows the origin it was created at), or null when the job no
   * longer wants this message.
   */
  assign(message: Message, runner: number): Promise<string | null>;
  /** The runner took it (a 2xx). */
  delivered(message: Message, runner: number): Promise<void>;
  /** The runner could not take it: the assignment is undone. */
  unassign(message: Message, runner: number): Promise<void>;
}

export interface RelayDeps {
  store: Store;
  key: CoordinatorKey;
  runners(contextId: number): Promise<Runner[]>;
  owner(message: Message): MessageOwner;
}

export interface RelayReport {
  delivered: number;
  queued: number;
  /** Put back on msg_out: no runner could take them now. */
  back: number;
}

/** In-flight deliveries per runner in this isolate: a runner at its concurrency is skipped. */
const load = new Map<string, number>();
const loadKey = (runner: Runner) => `${runner.context_id}:${runner.id}`;

/** Forgets one in-flight job of a runner (its result came back). */
export function releaseRunner(contextId: number, runnerId: number): void {
  const key = `${contextId}:${runnerId}`;
  const n = (load.get(key) ?? 1) - 1;
  if (n <= 0) load.delete(key);
  else load.set(key, n);
}

let rotation = 0;

const SETTLE_WITHIN_MS = 30_000;
const SETTLE_ATTEMPTS = 4;

/** Runners that may take a message: the pinned one, or those accepting its script type. */
function candidates(runners: Runner[], message: Message): { push: Runner[]; pull: Runner[] } {
  const job = message.job[0];
  if (!job) return { push: [], pull: [] };
  const fit = job.runner_id !== undefined ? runners.filter((r) => r.id === job.runner_id) : runners.filter((r) => r.script_types.includes(job.script_type));
  const push = fit.filter((r) => r.address !== "" && (load.get(loadKey(r)) ?? 0) < r.concurrency);
  // Spread work: least loaded first, ties in rotating order; a retry tries other runners than
  // the one its previous attempt failed on first.
  rotation++;
  const avoided = (r: Runner) => (r.id === message.avoid_runner_id ? 1 : 0);
  push.sort((a, b) => avoided(a) - avoided(b) || (load.get(loadKey(a)) ?? 0) - (load.get(loadKey(b)) ?? 0) || ((a.id + rotation) % 7) - ((b.id + rotation) % 7));
  return { push, pull: fit.filter((r) => r.local) };
}

/**
 * Moves messages from a context's msg_out to where they go. Takes up to `max` messages into the
 * in-flight set in one step (a crash leaves them there, never lost), then delivers each: a job
 * message to a push runner as a signed POST (2xx = acknowledged; busy or failing runners are
 * skipped for the next) or onto `queue:<script_type>` for pull runners, and what no runner can
 * take now goes back to the front of msg_out; a message between actors (chat, mail, a flow's
 * result) into its recipient's inbox. `own` holds messages the caller already has in memory.
 */
export async function relay(deps: RelayDeps, contextId: number, max: number, own: Map<string, Message> = new Map()): Promise<RelayReport> {
  // Deliveries time out after 10 s each: a relay that has not settled by then never will. The
  // sub-millisecond part makes the score this claim's own, so a late settle can tell.
  const settleBy = Date.now() + SETTLE_WITHIN_MS + Math.random();
  const keys = await deps.store.flowStore.claim(contextId, max, settleBy);
  if (keys.length === 0) return { delivered: 0, queued: 0, back: 0 };
  const foreign = keys.filter((k) => !own.has(k));
  const loaded = foreign.length > 0 ? await deps.store.flowStore.loadMessages(foreign) : [];
  const messages = new Map(own);
  foreign.forEach((k, i) => {
    const m = loaded[i];
    if (m) messages.set(k, m);
  });
  const runners = await deps.runners(contextId);
  const settlement: Settlement = { delivered: [], back: [], queued: [] };
  const queued = new Map<ScriptType, string[]>();

  await Promise.all(
    keys.map(async (key) => {
      const message = messages.get(key);
      if (message && message.message_type !== "job") {
        await deliverToActor(deps.store, deps.key, message); // settles the in-flight entry itself
        return;
      }
      if (!message || !message.job[0]) {
        settlement.delivered.push(key); // nothing to deliver: a vanished message leaves the relay
        return;
      }
      const job = message.job[0];
      const owner = deps.owner(message);
      const { push, pull } = candidates(runners, message);
      for (const runner of push) {
        const base = await owner.assign(message, runner.id);
        if (base === null) {
          settlement.delivered.push(key); // the job moved on (ended, or another attempt): drop it
          return;
        }
        const payload: DeliveryPayload = {
          message,
          context_id: contextId,
          flow_id: job.flow_id,
          job_id: job.id,
          attempt: message.attempt ?? 1,
          runner_id: runner.id,
          callbacks: callbacks(base),
        };
        load.set(loadKey(runner), (load.get(loadKey(runner)) ?? 0) + 1);
        const outcome = await deliver(runner, payload, deps.key);
        if (outcome === "delivered") {
          settlement.delivered.push(key);
          await owner.delivered(message, runner.id);
          return;
        }
        releaseRunner(contextId, runner.id);
        await owner.unassign(message, runner.id);
      }
      if (pull.length > 0) {
        const list = queued.get(job.script_type) ?? [];
        list.push(key);
        queued.set(job.script_type, list);
        return;
      }
      settlement.back.push(key);
    }),
  );
  settlement.queued = [...queued].map(([scriptType, list]) => ({ scriptType, keys: list }));
  await settleOrLeaveForTheSweep(deps.store, contextId, settlement, settleBy);
  return {
    delivered: settlement.delivered.length,
    queued: settlement.queued.reduce((n, q) => n + q.keys.length, 0),
    back: settlement.back.length,
  };
}

/**
 * Settles what the relay took, retrying a storage hiccup a few times. If storage stays away, the
 * messages stay in flight: the next claim after `settleBy` puts them back on msg_out, and the
 * context is marked due for the supervisor's sweep so that claim happens even if nothing else
 * relays there.
 */
async function settleOrLeaveForTheSweep(store: Store, contextId: number, settlement: Settlement, settleBy: number): Promise<void> {
  for (let attempt = 1; ; attempt++) {
    try {
      await store.flowStore.settle(contextId, settlement, settleBy);
      return;
    } catch (error) {
      if (attempt >= SETTLE_ATTEMPTS) {
        await callRedis(() => store.redis.exec(["ZADD", store.keys.sweepDue(), "LT", String(settleBy + 1_000), String(contextId)])).catch(() => undefined);
        throw error;
      }
      await new Promise((r) => setTimeout(r, 250 * 2 ** attempt));
    }
  }
}
