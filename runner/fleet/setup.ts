import { nanos, type NatsConnection } from "@nats-io/nats-core";
import {
  AckPolicy,
  DeliverPolicy,
  DiscardPolicy,
  jetstreamManager,
  RetentionPolicy,
  StorageType,
  type ConsumerConfig,
  type JetStreamManager,
  type StreamConfig,
} from "@nats-io/jetstream";
import { Kvm, type KV } from "@nats-io/kv";
import type { FleetNames } from "./names.js";

/** How a fleet's streams and consumers are set up (the command line's `--nats-*` options). */
export interface FleetSetup {
  /** Copies of each stream and bucket in a NATS cluster (1 on a single server). */
  replicas: number;
  /** Events and dead letters are dropped after this long (s); jobs are kept until a worker took them. */
  maxAgeSeconds: number;
  /** A job message not acknowledged (nor kept alive with `in-progress`) this long goes to another worker (s). */
  ackWaitSeconds: number;
  /** Starts of a job (or deliveries, when no live worker runs its type) before it goes to the dead letters. */
  maxDeliver: number;
  /** Job messages out with workers at once, fleet-wide. */
  maxAckPending: number;
}

export const DEFAULT_FLEET_SETUP: FleetSetup = {
  replicas: 1,
  maxAgeSeconds: 7 * 24 * 3600,
  ackWaitSeconds: 30,
  maxDeliver: 5,
  maxAckPending: 1000,
};

/**
 * A window in which a delivery published again (a retried push, a reaped claim delivered again)
 * is stored once: an hour, longer than the coordinator takes to deliver an attempt again.
 */
const JOBS_DUPLICATE_WINDOW_S = 3600;
/** The same for events (a worker's publish retried after a lost PubAck). */
const EVENTS_DUPLICATE_WINDOW_S = 120;
/** Worker announcements expire this long after the last one (each worker refreshes every third of it). */
export const WORKER_TTL_MS = 15_000;
/** The idempotency gate remembers an attempt this long: longer than any redelivery of it. */
const GATE_TTL_S = 24 * 3600;

/** The fleet's streams, consumers and buckets, opened (and created first where missing). */
export interface FleetStores {
  jsm: JetStreamManager;
  gate: KV;
  workers: KV;
}

/**
 * Creates the fleet's streams, consumers and KV buckets, or brings existing ones to this
 * configuration: every gateway and worker calls it on start, so it is idempotent, and whichever
 * starts first sets things up. A setting NATS cannot change in place (a stream's retention or
 * storage) is reported, naming the stream, rather than worked around.
 */
export async function ensureFleet(nc: NatsConnection, names: FleetNames, setup: FleetSetup): Promise<FleetStores> {
  const jsm = await jetstreamManager(nc);
  const common = { num_replicas: setup.replicas, storage: StorageType.File, discard: DiscardPolicy.Old };
  await ensureStream(jsm, {
    ...common,
    name: names.jobsStream,
    subjects: [names.jobsFilter],
    retention: RetentionPolicy.Workqueue,
    duplicate_window: nanos(JOBS_DUPLICATE_WINDOW_S * 1000),
  });
  await ensureStream(jsm, {
    ...common,
    name: names.eventsStream,
    subjects: [names.eventsFilter],
    retention: RetentionPolicy.Workqueue,
    max_age: nanos(setup.maxAgeSeconds * 1000),
    duplicate_window: nanos(EVENTS_DUPLICATE_WINDOW_S * 1000),
  });
  await ensureStream(jsm, {
    ...common,
    name: names.deadStream,
    subjects: [names.deadFilter],
    retention: RetentionPolicy.Limits,
    max_age: nanos(setup.maxAgeSeconds * 1000),
  });
  await ensureConsumer(jsm, names.jobsStream, {
    durable_name: names.workersConsumer,
    ack_policy: AckPolicy.Explicit,
    deliver_policy: DeliverPolicy.All,
    ack_wait: nanos(setup.ackWaitSeconds * 1000),
    // Redelivered for ever: the workers count starts in the gate and send a message past the
    // limit to the dead letters (and report it). JetStream's own limit would leave it in the work
    // stream, delivered to no one, holding a place in the fleet's capacity for good.
    max_deliver: -1,
    max_ack_pending: setup.maxAckPending,
  });
  await ensureConsumer(jsm, names.eventsStream, {
    durable_name: names.gatewayConsumer,
    ack_policy: AckPolicy.Explicit,
    deliver_policy: DeliverPolicy.All,
    // The gateway keeps an event alive while the coordinator retries; it never gives one up.
    ack_wait: nanos(setup.ackWaitSeconds * 1000),
    max_deliver: -1,
    max_ack_pending: Math.max(setup.maxAckPending, 1000),
  });
  const kvm = new Kvm(nc);
  const bucket = { replicas: setup.replicas, history: 1 };
  const gate = await kvm.create(names.gateBucket, { ...bucket, ttl: GATE_TTL_S * 1000 });
  const workers = await kvm.create(names.workersBucket, { ...bucket, ttl: WORKER_TTL_MS });
  return { jsm, gate, workers };
}

async function ensureStream(jsm: JetStreamManager, config: Partial<StreamConfig> & { name: string }): Promise<void> {
  let existing: StreamConfig;
  try {
    existing = (await jsm.streams.info(config.name)).config;
  } catch (error) {
    if (!isNotFound(error)) throw error;
    await jsm.streams.add(config);
    return;
  }
  for (const fixed of ["retention", "storage"] as const) {
    if (config[fixed] !== undefined && existing[fixed] !== config[fixed]) {
      throw new Error(
        `stream ${config.name} exists with ${fixed} ${existing[fixed]}, not ${config[fixed]}: NATS cannot change it in place (delete the stream to recreate it)`,
      );
    }
  }
  const { name, retention: _r, storage: _s, ...changeable } = config;
  if (Object.entries(changeable).some(([key, value]) => !same(existing[key as keyof StreamConfig], value))) {
    await jsm.streams.update(name, changeable);
  }
}

async function ensureConsumer(
  jsm: JetStreamManager,
  stream: string,
  config: Partial<ConsumerConfig> & {
    durable_name: string;
    ack_wait: number;
    max_deliver: number;
    max_ack_pending: number;
  },
): Promise<void> {
  let existing: ConsumerConfig;
  try {
    existing = (await jsm.consumers.info(stream, config.durable_name)).config;
  } catch (error) {
    if (!isNotFound(error)) throw error;
    await jsm.consumers.add(stream, config);
    return;
  }
  const { ack_wait, max_deliver, max_ack_pending } = config;
  const wanted = { ack_wait, max_deliver, max_ack_pending };
  if (Object.entries(wanted).some(([key, value]) => !same(existing[key as keyof ConsumerConfig], value))) {
    await jsm.consumers.update(stream, config.durable_name, wanted);
  }
}

function same(a: unknown, b: unknown): boolean {
  return JSON.stringify(a) === JSON.stringify(b);
}

/** A stream or consumer that does not exist (JetStream's 404). */
function isNotFound(error: unknown): boolean {
  const status = (error as { status?: number } | null)?.status;
  const message = (error as Error | null)?.message ?? "";
  return status === 404 || /not found/i.test(message);
}
