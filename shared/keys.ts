import type { IndexedKind } from "./key-members.js";
import { queueSuffix, type FlowStatus, type ScriptType } from "./model/enums.js";

/**
 * Every Redis key and queue name, built in one place. Layout (docs/architecture.md, "Storage"):
 * actors and global id counters are global; everything of context `C` lives under `ctx:{C}:`, a
 * Redis Cluster hash tag, so a script may touch any keys of one context; it is given every key it
 * touches, built here (layout.test.ts checks that none is joined in Lua). Inside the namespace the
 * model's canonical names apply (herocoordinator's `redis_key()`): `context:<C>`, `flow:<id>`,
 * `job:<caller>:<id>`, `message:<caller>:<id>`, `runner:<id>`, `msg_out`, `msg_in`, `queue:<type>`.
 * An optional deployment-wide `prefix` goes in front of every key, so deployments (or test files)
 * can share one database; it must not contain braces, or it would move the hash tag.
 *
 * `cluster`: the keys live on a Redis Cluster, where one script or multi-key command may name the
 * keys of one slot only. The names are the same; what changes is how the store writes the few
 * global keys that follow a context's (`sweep:due` after a commit or a sweep, the key epoch with
 * the database's identity): in commands of their own rather than in the context's script
 * (docs/deploy.md, "Redis Cluster").
 */
export class Keys {
  /** The keys live on a Redis Cluster: no script or command names keys of two slots. */
  readonly cluster: boolean;

  constructor(
    readonly prefix = "",
    options: { cluster?: boolean } = {},
  ) {
    this.cluster = options.cluster ?? false;
    if (/[{}]/.test(prefix)) throw new Error(`a key prefix must not contain braces: ${prefix}`);
    // "|" separates the parts of a work item (see workItem), so no key may contain one.
    if (prefix.includes("|")) throw new Error(`a key prefix must not contain "|": ${prefix}`);
  }

  // Global keys.

  /** `actor:<id>`: an actor's hash (the model's `Actor.redis_key()`). */
  actor(id: number): string {
    return `${this.prefix}actor:${id}`;
  }

  /** `actor_key:<pubkey>`: the id of the actor registered with that public key (one key, one actor). */
  actorByKey(pubkey: string): string {
    return `${this.prefix}actor_key:${pubkey}`;
  }

  /**
   * `runner_key:<pubkey>`: the runners registered with that public key, field `<context>` → runner
   * id. A hint beside the contexts' own `runner_keys` (another slot, so no script writes both): it
   * is written after them, and whoever reads it checks each entry against them.
   */
  runnersByKey(pubkey: string): string {
    return `${this.prefix}runner_key:${pubkey}`;
  }

  /**
   * A used signature nonce, until its signature could no longer be fresh; in the context's slot
   * for a runner's and a flow submission's (a script spends it). Scopes: docs/architecture.md.
   */
  nonce(keyid: string, nonce: string, contextId?: number): string {
    return contextId === undefined
      ? `${this.prefix}nonce:${keyid}:${nonce}`
      : `${this.namespace(contextId)}nonce:${keyid}:${nonce}`;
  }

  /** `ticket:<sha256>`: a single-use ticket opening one WebSocket as its signer (kept by digest). */
  ticket(digest: string): string {
    return `${this.prefix}ticket:${digest}`;
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

  /** Every context id (score = id), for operators and the supervisor. */
  contextIndex(): string {
    return `${this.prefix}index:context`;
  }

  // Keys inside a context.

  /** `ctx:{C}:`: the namespace every key of context `C` starts with. */
  namespace(contextId: number): string {
    return `${this.prefix}ctx:{${contextId}}:`;
  }

  /** `context:<C>`: the context's own hash (the model's `Context.redis_key()`). */
  context(contextId: number): string {
    return `${this.namespace(contextId)}context:${contextId}`;
  }

  /** `flow:<id>` (the model's `Flow.redis_key()`). */
  flow(contextId: number, id: number): string {
    return `${this.namespace(contextId)}flow:${id}`;
  }

  /** `job:<caller>:<id>` (the model's `RunnerJob.redis_key()`). */
  job(contextId: number, callerId: number, id: number): string {
    return `${this.namespace(contextId)}job:${callerId}:${id}`;
  }

  /** `message:<caller>:<id>` (the model's `Message.redis_key()`). */
  message(contextId: number, callerId: number, id: number): string {
    return `${this.namespace(contextId)}message:${callerId}:${id}`;
  }

  /** `runner:<id>` (the model's `Runner.redis_key()`). */
  runner(contextId: number, id: number): string {
    return `${this.namespace(contextId)}runner:${id}`;
  }

  /** `runner_keys`: the context's runners by public key (pubkey → id; `indexed` once all are). */
  runnerKeys(contextId: number): string {
    return `${this.namespace(contextId)}runner_keys`;
  }

  /** `msg_out`: outbound messages waiting for the supervisor's relay. */
  msgOut(contextId: number): string {
    return `${this.namespace(contextId)}msg_out`;
  }

  /** `msg_in:<actor>`: the model's inbound queue, one per recipient: only the actor's own messages. */
  msgIn(contextId: number, actorId: number): string {
    return `${this.namespace(contextId)}msg_in:${actorId}`;
  }

  /**
   * `queue:<script_type>:<flow>`: one flow's job attempts ready to run, waiting for a runner of
   * that script type (the model's `queue_suffix()`); flow 0 holds the jobs outside any flow. A
   * queue per flow is what lets dispatch take turns between flows (docs/dispatch.md). Push and
   * pull runners take from the same lists; entries are work items (see workItem).
   */
  queue(contextId: number, scriptType: ScriptType, flowId: number): string {
    return `${this.namespace(contextId)}queue:${queueSuffix(scriptType)}:${flowId}`;
  }

  /** `queue:runner:<id>:<flow>`: one flow's ready job attempts pinned to one runner (a job's `runner_id`). */
  pinnedQueue(contextId: number, runnerId: number, flowId: number): string {
    return `${this.namespace(contextId)}queue:runner:${runnerId}:${flowId}`;
  }

  /** The queue a job's attempts wait in: its flow's for the runner it is pinned to, else for its script type. */
  readyQueue(
    contextId: number,
    job: { runner_id?: number | undefined; script_type: ScriptType },
    flowId: number,
  ): string {
    return job.runner_id !== undefined
      ? this.pinnedQueue(contextId, job.runner_id, flowId)
      : this.queue(contextId, job.script_type, flowId);
  }

  /**
   * `runner:<id>:slots`: the attempts a runner holds, one member (a work item) per slot. Score:
   * when the slot was claimed while the delivery is under way, DELIVERED_SCORE (later than any
   * claim) once it was delivered. A runner never holds more members than its concurrency: the
   * claim that adds one counts them in the same script, and the commit that ends the attempt
   * removes it.
   */
  runnerSlots(contextId: number, runnerId: number): string {
    return `${this.namespace(contextId)}runner:${runnerId}:slots`;
  }

  /** Hash of runners whose deliveries fail (id → JSON: last error, when, next try), for operators. */
  runnerHealth(contextId: number): string {
    return `${this.namespace(contextId)}runner_health`;
  }

  /**
   * `throttle:flow_starts`: the context's flow-start throttle, the time (ms) from which its
   * next start is on schedule (GCRA), while the context has `flow_starts_per_minute`.
   */
  flowStarts(contextId: number): string {
    return `${this.namespace(contextId)}throttle:flow_starts`;
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

  /**
   * The waits for one event name and key (sorted set, member `<flow>:<job>` by when it times out,
   * ms): what an event sent with that name and key resumes, read in one command however many
   * waits and flows the context has. Name and key are written as JSON, so no text is ambiguous.
   */
  waits(contextId: number, name: string, key: string): string {
    return `${this.namespace(contextId)}waits:${JSON.stringify([name, key])}`;
  }

  /**
   * Events kept for waits that start later (the context's `event_lookback`): a sorted set by when
   * they were received (ms), member the event as JSON; it expires with the window.
   */
  keptEvents(contextId: number, name: string, key: string): string {
    return `${this.namespace(contextId)}events:${JSON.stringify([name, key])}`;
  }

  /** A sent event by its id (JSON: its digest and the waits it matched), for a day: what makes it idempotent. */
  sentEvent(contextId: number, id: string): string {
    return `${this.namespace(contextId)}event:${id}`;
  }

  /** Ended flows (`flow:<id>`) and jobs outside flows (`job:<caller>:<id>`) by end time (ms), what retention removes. */
  ended(contextId: number, status: "finished" | "error"): string {
    return `${this.namespace(contextId)}ended:${status}`;
  }

  /** Messages put in an inbox (inboxEntry) by when (ms): unread, they are removed after the inbox window. */
  inboxDue(contextId: number): string {
    return `${this.namespace(contextId)}inbox_due`;
  }

  /** Contexts whose deletion began and is not done, by when it began (ms): the sweep carries it on. */
  contextsDeleting(): string {
    return `${this.prefix}deleting:context`;
  }

  /** Hash: context → the SCAN cursor its deletion reached (deleteNamespace carries on from there). */
  deletionCursors(): string {
    return `${this.prefix}deleting:cursor`;
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

  /**
   * Hash of id counters inside the context (fields `flow`, `runner`, `job:<caller>`,
   * `message:<caller>`, `schedule`, `template:<name>`).
   */
  ids(contextId: number): string {
    return `${this.namespace(contextId)}ids`;
  }

  /** The field of `ids(C)` that numbers one caller's jobs (jobs are numbered per caller). */
  jobCounter(callerId: number): string {
    return `job:${callerId}`;
  }

  /** The field of `ids(C)` that numbers one caller's messages. */
  messageCounter(callerId: number): string {
    return `message:${callerId}`;
  }

  /** Sorted set indexing one kind of object in the context (member `<id>` or `<caller>:<id>`). */
  index(contextId: number, kind: IndexedKind): string {
    return `${this.namespace(contextId)}index:${kind}`;
  }

  /** Sorted set of the context's flows in one status (score = id), for listing by status. */
  flowsByStatus(contextId: number, status: FlowStatus): string {
    return `${this.namespace(contextId)}index:flow:${status}`;
  }

  // Figures and key revocation (issue 12: figures that are true across isolates).

  /**
   * `ctx:{C}:figures`: list of figure records (JSON, `flowFigures` in shared/flow/figures.ts),
   * one pushed by each flow's end and each end of a job outside a flow, waiting to be folded
   * into `contextCounters(C)` by a /metrics scrape or a sweep of the context.
   */
  contextFigures(contextId: number): string {
    return `${this.namespace(contextId)}figures`;
  }

  /**
   * `ctx:{C}:counters`: hash of the context's counters, the same for every isolate: `refused`
   * (deliveries a runner refused), and the folded figures (`finished`, `error`, `stopped`,
   * `retries`, `latency:<bucket>`, `latency_ms`, `duration:<bucket>`, `duration_ms`).
   */
  contextCounters(contextId: number): string {
    return `${this.namespace(contextId)}counters`;
  }

  /** Hash of global counters: `sweeps`, `swept` (contexts handed over), `settled`, `poked` (flows), `sweep_failures`. */
  counters(): string {
    return `${this.prefix}counters`;
  }

  /** `metrics:kept`: the last reading of /metrics (`<ms>\n<JSON>`); `metrics:refresh`: held while one is read afresh. */
  metrics(part: "kept" | "refresh"): string {
    return `${this.prefix}metrics:${part}`;
  }

  /** `key_epoch`: bumped (INCR) by every change of a key; read with `storeIdentity` (key-cache.ts). */
  keyEpoch(): string {
    return `${this.prefix}key_epoch`;
  }

  /** `identity`: the database's (`<ms>.<random>`), made at its first use (SET NX); another after a wipe. */
  storeIdentity(): string {
    return `${this.prefix}identity`;
  }

  // Recurring flows (issue 12: schedules; docs/schedules.md).

  /** `ctx:{C}:schedule:<id>`: a schedule's hash (its template, spec, policies, paused, next and last fire). */
  schedule(contextId: number, id: number): string {
    return `${this.namespace(contextId)}schedule:${id}`;
  }

  /**
   * `ctx:{C}:idem_schedule:<caller>:<key>`: the schedule an Idempotency-Key created (its id), for a
   * day; apart from flow submissions' keys, whose fires use `schedule:<id>:<ms>` keys of their own.
   */
  scheduleIdempotency(contextId: number, callerId: number, key: string): string {
    return `${this.namespace(contextId)}idem_schedule:${callerId}:${key}`;
  }

  /** `ctx:{C}:index:schedule`: sorted set of the context's schedule ids (score = id), for listing. */
  scheduleIndex(contextId: number): string {
    return `${this.namespace(contextId)}index:schedule`;
  }

  /** The field of `ids(C)` that numbers the context's schedules. */
  scheduleCounter(): string {
    return "schedule";
  }

  // Flow templates (issue 33: docs/templates.md).

  /**
   * `ctx:{C}:template:<name>`: a template's hash: `name`, `created_at`, `updated_at`, `latest`,
   * `oldest` (the versions kept), `digest` (the latest's), `description`, and per version `v`
   * its file (`f:<v>`, JSON) and what it is besides (`m:<v>`, JSON).
   */
  template(contextId: number, name: string): string {
    return `${this.namespace(contextId)}template:${name}`;
  }

  /** `ctx:{C}:index:template`: sorted set of the context's template names (all score 0: listed by name). */
  templateIndex(contextId: number): string {
    return `${this.namespace(contextId)}index:template`;
  }

  /**
   * The field of `ids(C)` that numbers a template's versions: it outlives a delete of the template,
   * so a version number is never given twice under one name in a context.
   */
  templateCounter(name: string): string {
    return `template:${name}`;
  }

  /**
   * `schedule:due`: sorted set of every active schedule (member `<context>:<schedule>`, see
   * scheduleDueMember) by its next fire (epoch ms). Each schedule's own alarm fires it; the sweep
   * reads this to poke those whose fire passed by more than a grace (the backstop).
   */
  scheduleDue(): string {
    return `${this.prefix}schedule:due`;
  }

  /** A member of `scheduleDue`: `<context>:<schedule>`. */
  scheduleDueMember(contextId: number, id: number): string {
    return `${contextId}:${id}`;
  }

  /** Reads a `scheduleDue` member back; null for anything else. */
  parseScheduleDueMember(member: string): { contextId: number; scheduleId: number } | null {
    const m = /^(\d+):(\d+)$/.exec(member);
    return m ? { contextId: Number(m[1]), scheduleId: Number(m[2]) } : null;
  }
}

export * from "./key-members.js";
