/**
 * Every JetStream name of a fleet, built in one place: streams, subjects, consumers, KV buckets
 * and keys. A fleet serves one registered runner, so its names carry the context and the runner:
 * two registered runners' fleets (of one context or of two) can share a NATS account without
 * their subjects overlapping. Subjects start with `tenant.<context>`, so NATS permissions can
 * keep a context's traffic to itself.
 */

import type { DeliveryPayload } from "../../shared/model/index.js";

/** The registered runner a fleet serves. */
export interface FleetIdentity {
  contextId: number;
  runnerId: number;
}

/** What names one attempt: the context, the message (its ids are per caller) and the attempt number. */
export interface AttemptRef {
  context_id: number;
  caller_id: number;
  message_id: number;
  attempt: number;
}

/** The names of one fleet's streams, consumers, buckets and subjects. */
export interface FleetNames {
  /** Work: one message per delivered attempt, removed once a worker acknowledged it (work queue). */
  jobsStream: string;
  /** Events: `started`, `heartbeat`, `logs` and `result` of the workers, relayed by the gateway. */
  eventsStream: string;
  /** Dead letters: deliveries that could not even start, kept for an operator. */
  deadStream: string;
  /** The durable consumer all workers share on the jobs stream. */
  workersConsumer: string;
  /** The durable consumer of the gateway(s) on the events stream. */
  gatewayConsumer: string;
  /** The idempotency gate: one key per attempt that finished (or was cancelled). */
  gateBucket: string;
  /** Each live worker's slots, refreshed while it runs (expiring entries). */
  workersBucket: string;
  /** Core NATS subject the gateway tells workers on to stop an attempt. */
  cancelSubject: string;
  /** Filter of the jobs stream. */
  jobsFilter: string;
  eventsFilter: string;
  deadFilter: string;
  /** The subject of a delivery of `scriptType` for `ref`. */
  job(scriptType: string, ref: AttemptRef): string;
  /** The subject of an event (`started`, `result`, …) of `ref`. */
  event(kind: string, ref: AttemptRef): string;
  dead(scriptType: string, ref: AttemptRef): string;
}

/** Builds the names of the fleet of `identity`. */
export function fleetNames(identity: FleetIdentity): FleetNames {
  const { contextId: c, runnerId: r } = identity;
  const base = `tenant.${c}.r${r}`;
  const stream = `FLEET_${c}_${r}`;
  return {
    jobsStream: `${stream}_JOBS`,
    eventsStream: `${stream}_EVENTS`,
    deadStream: `${stream}_DEAD`,
    workersConsumer: "workers",
    gatewayConsumer: "gateway",
    gateBucket: `fleet_${c}_${r}_gate`,
    workersBucket: `fleet_${c}_${r}_workers`,
    cancelSubject: `${base}.cancel`,
    jobsFilter: `${base}.job.>`,
    eventsFilter: `${base}.event.>`,
    deadFilter: `${base}.dead.>`,
    job: (scriptType, ref) => `${base}.job.${scriptType}.${messageToken(ref)}`,
    event: (kind, ref) => `${base}.event.${kind}.${messageToken(ref)}`,
    dead: (scriptType, ref) => `${base}.dead.${scriptType}.${messageToken(ref)}`,
  };
}

/** `<caller>-<message>-<attempt>`: one subject token per attempt. */
function messageToken(ref: AttemptRef): string {
  return `${ref.caller_id}-${ref.message_id}-${ref.attempt}`;
}

/**
 * The attempt's id in JetStream: the jobs stream's dedupe id (`Nats-Msg-Id`, so a delivery
 * published twice within the duplicate window is stored once) and its key in the gate bucket.
 */
export function attemptId(ref: AttemptRef): string {
  return `${ref.context_id}.${ref.caller_id}.${ref.message_id}.${ref.attempt}`;
}

/** The attempt a delivery is. */
export function attemptOf(payload: DeliveryPayload): AttemptRef {
  return {
    context_id: payload.context_id,
    caller_id: payload.message.caller_id,
    message_id: payload.message.id,
    attempt: payload.attempt,
  };
}
