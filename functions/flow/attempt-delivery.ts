import {
  jobEnvironment,
  reportedEnd,
  type FlowEvent,
  type FlowState,
  type JobState,
  type Transition,
} from "../../shared/flow/index.js";
import { parseWorkItem } from "../../shared/keys.js";
import { runnerKeyId } from "../../shared/auth/index.js";
import { scriptTypeOf, type DeliveryPayload, type Log, type Message } from "../../shared/model/index.js";
import { readyQueueOf, type Store } from "../../shared/store/index.js";
import type { DeliverAnswer, DeliveryTarget } from "../core/contracts.js";
import type { CoordinatorKey } from "../core/coordinator-key.js";
import { jobUrl, type FlowScope } from "../core/scopes.js";
import { deliveryPayload, pushDeliveries, type DeliveryOutcome } from "./delivery.js";

/** What a delivery needs from the FlowCoordinator that owns the attempt. */
export interface AttemptOwner {
  scope: FlowScope;
  state(): FlowState;
  /** Applies an event in the flow's next group commit (with the log lines it brought). */
  enqueue(event: FlowEvent, logs?: { job: number; lines: Log[] }): Promise<Transition>;
  store(): Store;
  signingKey(): Promise<CoordinatorKey>;
  /** How long a push runner has to answer a POST of deliveries (DELIVERY_TIMEOUT_MS). */
  deliveryTimeoutMs: number;
}

/**
 * Messages this object created and has not delivered yet, so a delivery need not read them back
 * from Redis. A cache: after eviction a delivery reads its message from storage.
 */
export class OutgoingMessages {
  private readonly byKey = new Map<string, Message>();

  remember(keyOf: (m: Message) => string, messages: Message[]): void {
    for (const m of messages) if (m.message_type === "job") this.byKey.set(keyOf(m), m);
  }

  async take(store: Store, key: string): Promise<Message | null> {
    const cached = this.byKey.get(key);
    if (cached) return cached;
    const [loaded] = await store.flows.loadMessages([key]);
    return loaded ?? null;
  }

  forget(key: string): void {
    this.byKey.delete(key);
  }

  /** Forgets every message: another flow under the same id numbers its messages anew. */
  clear(): void {
    this.byKey.clear();
  }
}

/** A claimed attempt, assigned and ready to go to its runner, or answered already. */
type Prepared =
  | { answer: DeliverAnswer }
  | {
      base: { job: number; attempt: number; runner: number };
      messageKey: string;
      spec: JobState["spec"];
      payload: DeliveryPayload;
    };

/**
 * Delivers claimed attempts to the runner their slots were claimed at: records each assignment
 * (so reports from that runner are accepted from the first), POSTs them to a push runner (a 2xx
 * acknowledges a delivery; up to the runner's `deliveries_per_post` go in one POST) or hands
 * them to the lease of a pull runner, and records each outcome. Asked again for the same runner
 * (a reaped claim), it delivers again only if it never learned how the first try ended; asked
 * about an attempt that moved on, it answers `gone`. Answers in the items' order, each settled on
 * its own (the assignments meet in one group commit, as do the outcomes of one POST).
 */
export async function deliverAttempts(
  owner: AttemptOwner,
  outgoing: OutgoingMessages,
  items: readonly string[],
  runner: DeliveryTarget,
): Promise<PromiseSettledResult<DeliverAnswer>[]> {
  const prepared = await Promise.allSettled(items.map((item) => prepare(owner, outgoing, item, runner)));
  const sending = prepared.flatMap((p) => (p.status === "fulfilled" && "payload" in p.value ? [p.value] : []));
  const sent = new Map<Prepared, Promise<DeliveryOutcome>>();
  if (runner.address !== "" && sending.length > 0) {
    const { kid, key } = await owner.signingKey();
    const payloads = sending.map((p) => p.payload);
    const target = {
      ...runner,
      keyid: runnerKeyId(owner.scope.contextId, runner.id),
      timeoutMs: owner.deliveryTimeoutMs,
    };
    const outcomes = pushDeliveries(target, payloads, { keyid: kid, key });
    sending.forEach((p, i) => sent.set(p, outcomes[i] as Promise<DeliveryOutcome>));
  }
  return Promise.allSettled(
    prepared.map(async (p) => {
      if (p.status === "rejected") throw p.reason;
      if ("answer" in p.value) return p.value.answer;
      // Recorded as soon as its own POST is answered (no outcome: handed to a pull runner's lease).
      return record(owner, outgoing, p.value, await sent.get(p.value));
    }),
  );
}

/** Records the assignment of one claimed attempt and builds its delivery. */
async function prepare(
  owner: AttemptOwner,
  outgoing: OutgoingMessages,
  item: string,
  runner: DeliveryTarget,
): Promise<Prepared> {
  const work = parseWorkItem(item);
  if (!work) return { answer: { outcome: "gone", reason: `not a work item: ${item}` } };
  const base = { job: work.jobId, attempt: work.attempt, runner: runner.id };
  // Assigned already (by the commit that claimed it, or a try before whose outcome is not known):
  // the event would change nothing, and it need not wait for a batch of its own.
  const assigned = assignedTo(owner, base)
    ? undefined
    : await owner.enqueue({ type: "assigned", ...base, at: Date.now() });
  const job = owner.state().jobs.get(work.jobId);
  if (assigned?.outcome === "duplicate" && job?.delivery?.state !== "assigned") {
    return { answer: { outcome: "delivered" } }; // delivered before; its outcome is known
  }
  if (!job || (assigned && assigned.outcome !== "applied" && assigned.outcome !== "duplicate")) {
    outgoing.forget(work.messageKey);
    return { answer: { outcome: "gone", reason: assigned?.reason ?? "the attempt no longer wants a runner" } };
  }
  const message = await outgoing.take(owner.store(), work.messageKey);
  if (!message) {
    await owner.enqueue({ type: "unassigned", ...base, at: Date.now() });
    return { answer: { outcome: "gone", reason: `message ${work.messageKey} is gone` } };
  }
  const env = jobEnvironment(owner.state(), { ...job, attempt: work.attempt });
  // A map's instance's message leaves its map's script out (flow-records.ts): the state has it.
  const url = jobUrl(owner.scope.origin, owner.scope, work.jobId);
  const payload = deliveryPayload(message, env, runner.id, url, job.spec.script);
  return { base, messageKey: work.messageKey, spec: job.spec, payload };
}

/**
 * Records how a delivery went: taken by the runner (or handed to a lease: no outcome), and ended
 * too if the runner's answer reported so (in the same group commit); not known, which counts as
 * taken and not acknowledged: it may have reached the runner, so it is never sent again (here or
 * to another runner), the runner's reports are taken as usual, and if none come the attempt's
 * acknowledgement deadline fails it (a retry is a new attempt); or refused, which puts it back.
 */
async function record(
  owner: AttemptOwner,
  outgoing: OutgoingMessages,
  prepared: Extract<Prepared, { payload: DeliveryPayload }>,
  sent: DeliveryOutcome | undefined,
): Promise<DeliverAnswer> {
  const { base, messageKey, spec, payload } = prepared;
  if (sent?.delivered !== false) {
    const at = Date.now();
    const unconfirmed = sent?.delivered === "unknown" ? unconfirmedBy(owner, base, sent.reason) : {};
    const acknowledged = sent?.delivered === true;
    const delivered = owner.enqueue({ type: "delivered", ...base, acknowledged, ...unconfirmed, at });
    const report = sent?.delivered === true ? sent.report : undefined;
    // Queued in the same turn: one batch, delivered before it ends. Its outcome (a duplicate, an
    // attempt that moved on) is the machine's to judge, as a result webhook's would be.
    const ended = report
      ? owner.enqueue(
          { ...reportedEnd({ ...base, at }, report), ...(report.status === "error" ? { random: Math.random() } : {}) },
          report.logs.length > 0 ? { job: base.job, lines: report.logs } : undefined,
        )
      : undefined;
    await Promise.all([delivered, ended]);
    outgoing.forget(messageKey);
    return sent ? { outcome: "delivered" } : { outcome: "delivered", payload };
  }
  await owner.enqueue({ type: "unassigned", ...base, reason: sent.reason, at: Date.now() });
  return {
    outcome: "refused",
    reason: sent.reason,
    queue: readyQueueOf(owner.store().keys, owner.state(), {
      ...spec,
      script_type: scriptTypeOf({ id: base.job, script_type: spec.script_type }),
    }),
  };
}

/** A delivery of unknown outcome, said in the Worker's log and in the `delivered` event. */
function unconfirmedBy(
  owner: AttemptOwner,
  base: { job: number; attempt: number; runner: number },
  reason: string,
): { unconfirmed: string } {
  const { contextId, flowId } = owner.scope;
  console.warn(
    `context ${contextId} flow ${flowId} job ${base.job} attempt ${base.attempt}: runner ${base.runner} ${reason}; counted as delivered, not sent again`,
  );
  return { unconfirmed: reason };
}

/** Whether memory holds the attempt as assigned to the runner and not delivered yet. */
function assignedTo(owner: AttemptOwner, base: { job: number; attempt: number; runner: number }): boolean {
  let job: JobState | undefined;
  try {
    job = owner.state().jobs.get(base.job);
  } catch {
    return false; // not in memory: the event reads it back
  }
  return job?.attempt === base.attempt && job.delivery?.state === "assigned" && job.delivery.runnerId === base.runner;
}
