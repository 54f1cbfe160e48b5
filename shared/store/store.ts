import { Keys } from "../keys.js";
import type { Actor, Context, RunnerJob } from "../model/index.js";
import { ActorKeys } from "./actor-keys.js";
import { ContextAdmin } from "./contexts.js";
import { DeadLetters } from "./dead-letters.js";
import { DispatchStore } from "./dispatch-store.js";
import { FlowStore } from "./flow-store.js";
import { layouts } from "./layouts.js";
import { FlowResults } from "./flow-results.js";
import { MessageStore } from "./message-store.js";
import { KeyEpoch } from "./key-epoch.js";
import { MetricsStore } from "./metrics-store.js";
import { NonceStore } from "./nonce-store.js";
import { callRedis, connectRedis, type Redis, type RedisConfig } from "./redis.js";
import { Repository } from "./repository.js";
import { KeyHolders } from "./key-holders.js";
import { RunnerStore } from "./runner-store.js";
import { RetentionStore } from "./retention-store.js";
import { ScheduleStore } from "./schedule-store.js";
import { SweepStore } from "./sweep-store.js";
import { TemplateStore } from "./template-store.js";
import { Throttles } from "./throttles.js";
import { TicketStore } from "./ticket-store.js";
import { EventStore } from "./event-store.js";

/** Unix epoch seconds, the models' timestamp unit. */
export function epochSeconds(): number {
  return Math.floor(Date.now() / 1000);
}

/** What a deployment sets for the storage layer (wrangler.toml vars, read by the Worker). */
export interface StoreLimits {
  /** Most dead letters a context keeps unless its `retention.dead_letters` says otherwise (DEAD_LETTERS_MAX). */
  deadLetters?: number;
}

/**
 * The storage layer, and the only door to Redis: one part per role over one Upstash-protocol
 * client, every key built by `keys` (whose prefix keeps deployments and test files apart). The
 * client itself stays inside; nothing outside shared/store/ sends a command.
 */
export class Store {
  readonly actors: Repository<Actor>;
  readonly contexts: Repository<Context>;
  readonly jobs: Repository<RunnerJob>;
  /** Runners, with the index that keeps each public key one runner's per context. */
  readonly runners: RunnerStore;
  /** Flows: the scripts of their lifecycle, the relay of msg_out, and the reads that rebuild a flow. */
  readonly flows: FlowStore;
  /** Messages: ids, posting between actors, inboxes, and loading one. */
  readonly messages: MessageStore;
  /** Flows' results, read from their jobs: what a result mail tells when it is read or POSTed. */
  readonly results: FlowResults;
  /** The one-key-one-actor index. */
  readonly actorKeys: ActorKeys;
  /** Who holds a public key: its actor and its runners (`GET /v1/whoami`). */
  readonly keyHolders: KeyHolders;
  /** Permission changes, pausing dispatch, and deletion of whole contexts. */
  readonly contextAdmin: ContextAdmin;
  /** Ready queues, runners' slots (global concurrency) and runners' delivery trouble. */
  readonly dispatch: DispatchStore;
  /** What the coordinator gave up on, per context. */
  readonly deadLetters: DeadLetters;
  /** Signature nonces of signed requests. */
  readonly nonces: NonceStore;
  /** The supervisor's due contexts and the flows' check times. */
  readonly sweep: SweepStore;
  /** Single-use tickets that open a WebSocket as their signer. */
  readonly tickets: TicketStore;
  /** Events for the context's waits: the index of waits by event name and key, and kept events. */
  readonly events: EventStore;
  /** Throttles: flow starts per minute. */
  readonly throttles: Throttles;
  /** Recurring flows: schedule records and the global set of their next fires. */
  readonly schedules: ScheduleStore;
  /** Flow templates: numbered versions of flow files, by name (docs/templates.md). */
  readonly templates: TemplateStore;
  /** Figures for /metrics, the same from every isolate. */
  readonly metrics: MetricsStore;
  /** The key-revocation epoch, which tells isolates to drop their cache of public keys. */
  readonly keyEpoch: KeyEpoch;
  /** Ended flows waiting for their retention window, their removal, and what a context stores. */
  readonly retention: RetentionStore;

  constructor(
    private readonly redis: Redis,
    readonly keys: Keys = new Keys(),
    readonly now: () => number = epochSeconds,
    limits: StoreLimits = {},
  ) {
    const l = layouts(keys);
    this.actors = new Repository(redis, l.actor, now);
    this.contexts = new Repository(redis, l.context, now);
    this.jobs = new Repository(redis, l.job, now);
    this.keyHolders = new KeyHolders(redis, keys);
    this.runners = new RunnerStore(redis, l.runner, keys, now, this.keyHolders);
    this.flows = new FlowStore(redis, keys);
    this.messages = new MessageStore(redis, keys, now);
    this.results = new FlowResults(redis, keys);
    this.actorKeys = new ActorKeys(redis, keys);
    this.contextAdmin = new ContextAdmin(redis, keys, now, this.keyHolders);
    this.dispatch = new DispatchStore(redis, keys);
    this.deadLetters = new DeadLetters(redis, keys, limits.deadLetters);
    this.nonces = new NonceStore(redis, keys);
    this.sweep = new SweepStore(redis, keys);
    this.tickets = new TicketStore(redis, keys);
    this.events = new EventStore(redis, keys);
    this.throttles = new Throttles(redis, keys);
    this.schedules = new ScheduleStore(redis, keys);
    this.templates = new TemplateStore(redis, keys);
    this.metrics = new MetricsStore(redis, keys);
    this.keyEpoch = new KeyEpoch(redis, keys);
    this.retention = new RetentionStore(redis, keys);
  }

  /** One round trip to Redis; resolves with how long it took. */
  async ping(): Promise<{ latencyMs: number }> {
    const started = Date.now();
    await callRedis(() => this.redis.exec(["PING"]));
    return { latencyMs: Date.now() - started };
  }
}

/** A Store over a new client of the Upstash-protocol endpoint `config` names. */
export function connectStore(
  config: RedisConfig,
  keys: Keys = new Keys(),
  now: () => number = epochSeconds,
  limits: StoreLimits = {},
): Store {
  return new Store(connectRedis(config), keys, now, limits);
}
