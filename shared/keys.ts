import { queueSuffix, type FlowStatus, type ScriptType } from "./model/enums.js";

/**
 * Every Redis key and queue name, built in one place.
 *
 * Layout (DESIGN.md): actors and id counters for global objects are global; everything of
 * context `C` lives under `ctx:{C}:`. The braces are a Redis Cluster hash tag, so one context's
 * keys share a slot and a Lua script may touch any of them, including keys it derives at run
 * time from a prefix (a freshly allocated id), without crossing slots. Inside the namespace the
 * seeds' canonical names apply: `context:<C>`, `flow:<id>`, `job:<caller>:<id>`,
 * `message:<caller>:<id>`, `runner:<id>`, `msg_out`, `msg_in`, `queue:<script_type>`.
 *
 * An optional deployment-wide `prefix` goes in front of every key, so several deployments (or
 * test files) can share one database without seeing each other. It must not contain braces,
 * or it would move the hash tag.
 */
export class Keys {
  constructor(readonly prefix = "") {
    if (/[{}]/.test(prefix)) throw new Error(`a key prefix must not contain braces: ${prefix}`);
  }

  // Global keys.

  /** `actor:<id>`: an actor's hash (the seeds' `Actor.redis_key()`). */
  actor(id: number): string {
    return `${this.prefix}actor:${id}`;
  }

  /** `actor_key:<pubkey>`: the id of the actor registered with that public key (one key, one actor). */
  actorByKey(pubkey: string): string {
    return `${this.prefix}actor_key:${pubkey}`;
  }

  /**
   * A used signature nonce, kept until its signature could no longer be fresh. A runner's nonces
   * live in its context's slot, so a transition script can consume one in the same round trip.
   */
  nonce(keyid: string, nonce: string, contextId?: number): string {
    return contextId === undefined ? `${this.prefix}nonce:${keyid}:${nonce}` : `${this.namespace(contextId)}nonce:${keyid}:${nonce}`;
  }

  /** Hash of id counters for global objects (fields `actor`, `context`). */
  globalIds(): string {
    return `${this.prefix}ids`;
  }

  /** Sorted set of every actor id (score = id). */
  actorIndex(): string {
    return `${this.prefix}index:actor`;
  }

  /**
   * Sorted set of contexts with something for the supervisor to check (score: when). An idle
   * sweep reads only this: one command whatever the number of contexts.
   */
  sweepDue(): string {
    return `${this.prefix}sweep:due`;
  }

  /** Sorted set of every context id (score = id), for operators and the supervisor. */
  contextIndex(): string {
    return `${this.prefix}index:context`;
  }

  // Keys inside a context.

  /** `ctx:{C}:`: the namespace every key of context `C` starts with. */
  namespace(contextId: number): string {
    return `${this.prefix}ctx:{${contextId}}:`;
  }

  /** `context:<C>`: the context's own hash (the seeds' `Context.redis_key()`). */
  context(contextId: number): string {
    return `${this.namespace(contextId)}context:${contextId}`;
  }

  /** `flow:<id>` (the seeds' `Flow.redis_key()`). */
  flow(contextId: number, id: number): string {
    return `${this.namespace(contextId)}flow:${id}`;
  }

  /** `job:<caller>:<id>` (the seeds' `RunnerJob.redis_key()`). */
  job(contextId: number, callerId: number, id: number): string {
    return `${this.namespace(contextId)}job:${callerId}:${id}`;
  }

  /** `message:<caller>:<id>` (the seeds' `Message.redis_key()`). */
  message(contextId: number, callerId: number, id: number): string {
    return `${this.namespace(contextId)}message:${callerId}:${id}`;
  }

  /** `runner:<id>` (the seeds' `Runner.redis_key()`). */
  runner(contextId: number, id: number): string {
    return `${this.namespace(contextId)}runner:${id}`;
  }

  /** `msg_out`: outbound messages waiting for the supervisor's relay. */
  msgOut(contextId: number): string {
    return `${this.namespace(contextId)}msg_out`;
  }

  /**
   * `msg_in:<actor>`: the seeds' inbound queue, one per recipient, so an actor reads and pops
   * only its own messages (results of its flows, chat and mail from other members).
   */
  msgIn(contextId: number, actorId: number): string {
    return `${this.namespace(contextId)}msg_in:${actorId}`;
  }

  /** `queue:<script_type>`: jobs for `local` runners (the seeds' `queue_suffix()`). */
  queue(contextId: number, scriptType: ScriptType): string {
    return `${this.namespace(contextId)}queue:${queueSuffix(scriptType)}`;
  }

  /**
   * Sorted set of messages the relay took from `msg_out` and is delivering (score: the time by
   * which the delivery must be settled). Taking from `msg_out` and adding here is one step, so a
   * relay that dies mid-delivery loses nothing.
   */
  inflight(contextId: number): string {
    return `${this.namespace(contextId)}inflight`;
  }

  /** Sorted set of the context's active flows (member `flow:<id>` or `job:<caller>:<id>`) by next check time. */
  deadlines(contextId: number): string {
    return `${this.namespace(contextId)}deadlines`;
  }

  /** Hash of the context's dead letters: entry id → the entry (JSON). */
  deadLetters(contextId: number): string {
    return `${this.namespace(contextId)}deadletters`;
  }

  /** Sorted set of the dead letters' ids by when they died (epoch ms), for listing. */
  deadLetterIndex(contextId: number): string {
    return `${this.namespace(contextId)}index:deadletter`;
  }

  /** `Idempotency-Key` of a submission → the flow it created (expires after a day). */
  idempotency(contextId: number, callerId: number, key: string): string {
    return `${this.namespace(contextId)}idem:${callerId}:${key}`;
  }

  /** Hash of id counters inside the context (fields `flow`, `runner`, `job:<caller>`, ...). */
  ids(contextId: number): string {
    return `${this.namespace(contextId)}ids`;
  }

  /** Sorted set indexing one kind of object in the context (member `<id>` or `<caller>:<id>`). */
  index(contextId: number, kind: IndexedKind): string {
    return `${this.namespace(contextId)}index:${kind}`;
  }

  /** Sorted set of the context's flows in one status (score = id), for listing by status. */
  flowsByStatus(contextId: number, status: FlowStatus): string {
    return `${this.namespace(contextId)}index:flow:${status}`;
  }
}

/** The kinds of context objects that have an index for listing. */
export type IndexedKind = "flow" | "job" | "message" | "runner";
