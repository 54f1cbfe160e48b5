import { Keys } from "../keys.js";
import type { Actor, Context, Flow, Message, Runner, RunnerJob } from "../model/index.js";
import { ActorKeys } from "./actor-keys.js";
import { ContextAdmin } from "./contexts.js";
import { DeadLetters } from "./dead-letters.js";
import { DispatchStore } from "./dispatch-store.js";
import { FlowStore } from "./flow-store.js";
import { layouts } from "./layouts.js";
import { MessageStore } from "./message-store.js";
import { callRedis, type Redis } from "./redis.js";
import { Repository } from "./repository.js";

/** Unix epoch seconds, the seeds' timestamp unit. */
export function epochSeconds(): number {
  return Math.floor(Date.now() / 1000);
}

/**
 * The storage layer: one repository per model over one Upstash-protocol client, every key built
 * by `keys` (whose prefix keeps deployments and test files apart).
 */
export class Store {
  readonly actors: Repository<Actor>;
  readonly contexts: Repository<Context>;
  readonly flows: Repository<Flow>;
  readonly jobs: Repository<RunnerJob>;
  readonly messages: Repository<Message>;
  readonly runners: Repository<Runner>;
  /** The one-key-one-actor index. */
  readonly actorKeys: ActorKeys;
  /** Permission changes and deletion of whole contexts. */
  readonly contextAdmin: ContextAdmin;
  /** Flow lifecycle scripts, the relay of msg_out, and the reads that rebuild a flow. */
  readonly flowStore: FlowStore;
  /** Ready queues, runners' slots (global concurrency) and runners' delivery trouble. */
  readonly dispatch: DispatchStore;
  /** Messages between actors and their inboxes. */
  readonly messageStore: MessageStore;
  /** What the coordinator gave up on, per context. */
  readonly deadLetters: DeadLetters;

  constructor(
    readonly redis: Redis,
    readonly keys: Keys = new Keys(),
    readonly now: () => number = epochSeconds,
  ) {
    const l = layouts(keys);
    this.actors = new Repository(redis, l.actor, now);
    this.contexts = new Repository(redis, l.context, now);
    this.flows = new Repository(redis, l.flow, now);
    this.jobs = new Repository(redis, l.job, now);
    this.messages = new Repository(redis, l.message, now);
    this.runners = new Repository(redis, l.runner, now);
    this.actorKeys = new ActorKeys(redis, keys);
    this.contextAdmin = new ContextAdmin(redis, keys, now);
    this.flowStore = new FlowStore(redis, keys);
    this.dispatch = new DispatchStore(redis, keys);
    this.messageStore = new MessageStore(redis, keys, now);
    this.deadLetters = new DeadLetters(redis, keys);
  }

  /** One round trip to Redis; resolves with how long it took. */
  async ping(): Promise<{ latencyMs: number }> {
    const started = Date.now();
    await callRedis(() => this.redis.exec(["PING"]));
    return { latencyMs: Date.now() - started };
  }
}
