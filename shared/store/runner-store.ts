import type { Keys } from "../keys.js";
import { MAX_ID } from "../model/common.js";
import type { Runner } from "../model/index.js";
import { encodePairs } from "./codec.js";
import { ConflictError, NotFoundError, StoreError } from "./errors.js";
import type { KeyHolders } from "./key-holders.js";
import { callRedis, type Redis } from "./redis.js";
import { Repository, type CreateInput, type Patch, type RecordLayout, type RecordRef } from "./repository.js";
import type { ScriptReply } from "./script.js";
import { createRunner, deleteRunner, updateRunnerKey } from "./scripts/runner.js";

/** A public key is one runner's in a context: this one already holds it (409). */
export class RunnerKeyTakenError extends ConflictError {
  override name = "RunnerKeyTakenError";
  constructor(
    readonly contextId: number,
    readonly pubkey: string,
    /** The runner that holds the key. */
    readonly holder: number,
  ) {
    super("runner key", pubkey, `public key ${pubkey} is registered to runner ${holder} of context ${contextId}`);
  }
}

/** How often a write starts over after its read went stale (a concurrent change of the runner). */
const MAX_TRIES = 8;

/**
 * The runners of contexts: a Repository whose writes also keep the key index (`runner_keys`,
 * scripts/runner.ts), one script each, so two runners of a context never
 * hold one key: registering a key again, or patching a runner to a key another holds, is refused
 * with RunnerKeyTakenError naming the holder. Each write then brings the global hint of who holds
 * a key (`runner_key:<pubkey>`, KeyHolders) up to date: it is in another slot, so after the script.
 */
export class RunnerStore extends Repository<Runner> {
  constructor(
    private readonly db: Redis,
    private readonly shape: RecordLayout<Runner>,
    private readonly keys: Keys,
    private readonly clock: () => number,
    private readonly holders: KeyHolders,
  ) {
    super(db, shape, clock);
  }

  /**
   * Registers a runner. A retry of this same call (its token) finds it created; any other
   * registration of a key a runner of the context holds is refused, whoever asks.
   */
  override async create(input: CreateInput<Runner>, token: string = crypto.randomUUID()): Promise<Runner> {
    const { id: chosen, ...rest } = input;
    for (let tries = 0; tries < MAX_TRIES * 4; tries++) {
      const id = chosen ?? (await this.allocate(rest.context_id));
      const record = this.record(rest, id);
      const answer = await createRunner.run(
        this.db,
        [this.shape.key(record), this.shape.indexKey(record), this.keys.runnerKeys(record.context_id)],
        [String(id), id, token, record.pubkey, ...encodePairs(this.shape.codec, record)],
      );
      const [code, holder] = codeOf(answer);
      if (code === 1) {
        await this.holders.noteRunner(record.pubkey, record.context_id, id);
        return record;
      }
      if (code === 0 && chosen !== undefined) throw new ConflictError("runner", `${id} (context ${record.context_id})`);
      if (code === 2) throw new RunnerKeyTakenError(record.context_id, record.pubkey, holder);
      // 0 with an allocated id (taken by a runner of a chosen id): the next id.
    }
    throw new StoreError(`could not register a runner in context ${input.context_id}: it kept changing`);
  }

  /** Patches a runner; a new key moves its index entry, refused when another runner holds the key. */
  override async update(ref: RecordRef, patch: Patch<Runner>): Promise<Runner> {
    for (let tries = 0; tries < MAX_TRIES; tries++) {
      const current = await this.load(ref);
      // The same key (or none given): nothing to move, and a retried patch that already moved it lands here.
      if (patch.pubkey === undefined || patch.pubkey === current.pubkey) return super.update(ref, patch);
      const merged = this.shape.codec.schema.parse({ ...current, ...patch, updated_at: this.clock() });
      const removed = Object.keys(patch).filter((k) => (patch as Record<string, unknown>)[k] === undefined);
      const changed = encodePairs(this.shape.codec, { ...patch, updated_at: merged.updated_at });
      const contextId = merged.context_id;
      const answer = await updateRunnerKey.run(
        this.db,
        [this.shape.key(merged), this.keys.runnerKeys(contextId)],
        [String(merged.id), current.pubkey, merged.pubkey, removed.length, ...removed, ...changed],
      );
      const [code, holder] = codeOf(answer);
      if (code === 1) {
        await this.holders.noteRunner(merged.pubkey, contextId, merged.id);
        await this.holders.forgetRunner(current.pubkey, contextId, merged.id);
        return merged;
      }
      if (code === 0) throw new NotFoundError("runner", `${ref.id} (context ${contextId})`);
      if (code === 2) throw new RunnerKeyTakenError(contextId, merged.pubkey, holder);
    }
    throw new StoreError(`runner ${ref.id} kept changing while it was patched`);
  }

  /** Removes a runner, its index entry and its key's entry; NotFoundError when there was none. */
  override async delete(ref: RecordRef): Promise<void> {
    for (let tries = 0; tries < MAX_TRIES; tries++) {
      const current = await this.find(ref);
      if (!current) throw new NotFoundError("runner", `${ref.id} (context ${ref.context_id})`);
      const deleted = await deleteRunner.run(
        this.db,
        [this.shape.key(current), this.shape.indexKey(current), this.keys.runnerKeys(current.context_id)],
        [String(current.id), current.pubkey],
      );
      if (Number(deleted) === 1) {
        await this.holders.forgetRunner(current.pubkey, current.context_id, current.id);
        return;
      }
      if (Number(deleted) === 0) throw new NotFoundError("runner", `${ref.id} (context ${ref.context_id})`);
    }
    throw new StoreError(`runner ${ref.id} kept changing while it was removed`);
  }

  /** The next runner id of the context (ids chosen by callers are skipped by the script's refusal). */
  private async allocate(contextId: number): Promise<number> {
    const counter = this.shape.counter({ context_id: contextId });
    const id = Number(await callRedis(() => this.db.exec<number>(["HINCRBY", counter.key, counter.field, "1"])));
    if (id > MAX_ID) throw new StoreError(`runner ids are exhausted in ${counter.key}`);
    return id;
  }

  /** The whole record as `create` stores it (Repository's own, which this class cannot reach). */
  private record(rest: Omit<CreateInput<Runner>, "id">, id: number): Runner {
    const now = this.clock();
    const filled = this.shape.withId ? this.shape.withId(rest, id) : rest;
    return this.shape.codec.schema.parse({ ...filled, id, created_at: now, updated_at: now });
  }
}

/** A script's `{code, holder?}` answer. */
function codeOf(answer: ScriptReply): [number, number] {
  const [code, holder] = Array.isArray(answer) ? answer : [answer];
  return [Number(code), Number(holder ?? 0)];
}
