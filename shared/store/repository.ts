import { MAX_ID } from "../model/common.js";
import { decodeRecord, encodePairs, type RecordCodec } from "./codec.js";
import { ConflictError, NotFoundError, StoreError } from "./errors.js";
import { readHash, readHashes, readIndexPage, toPage, type Page } from "./reads.js";
import { callRedis, type Redis } from "./redis.js";
import { createRecord, deleteRecord, updateRecord } from "./scripts/record.js";

/** What identifies a record: its id plus, depending on the model, its context and caller. */
export interface RecordRef {
  id: number;
  context_id?: number | undefined;
  caller_id?: number | undefined;
}

/** Fields the store maintains itself. */
export type Managed = "id" | "created_at" | "updated_at";

/** The input of `create`: every field but the managed ones, and optionally a chosen id. */
export type CreateInput<T> = Omit<T, Managed> & { id?: number };

/** The input of `update`: any fields but the ids and timestamps. */
export type Patch<T> = Partial<Omit<T, Managed | "context_id" | "caller_id">>;

export type { Page } from "./reads.js";

/** Where a model's records live and how they are indexed and numbered. */
export interface RecordLayout<T extends RecordRef> {
  codec: RecordCodec<T>;
  /** The hash key of one record. */
  key(ref: RecordRef): string;
  /** The hash of id counters, and the field in it, that numbers new records in this scope. */
  counter(ref: Omit<RecordRef, "id">): { key: string; field: string };
  /** The index sorted set of a scope. */
  indexKey(scope: Omit<RecordRef, "id">): string;
  /** A record's member in its index: `<id>`, or `<caller>:<id>` for caller-numbered records. */
  indexMember(ref: RecordRef): string;
  /**
   * True when the index shares a slot with the record, so one script writes both. A global index
   * of records in context namespaces is written in a second, idempotent step instead.
   */
  indexInSlot: boolean;
  /** Fills fields that are derived from the id (a runner's default topic, say). */
  withId?(input: Omit<T, Managed>, id: number): Omit<T, Managed>;
}

/** How many times `create` re-numbers when an allocated id turns out to be taken. */
const MAX_ALLOCATION_ATTEMPTS = 32;

/**
 * Create / load / update / delete / list for one model. Reads are parsed by the model's schema;
 * writes are validated by it first, so an invalid object is never stored.
 */
export class Repository<T extends RecordRef & { created_at: number; updated_at: number }> {
  constructor(
    private readonly redis: Redis,
    private readonly layout: RecordLayout<T>,
    private readonly now: () => number,
  ) {}

  private get kind(): string {
    return this.layout.codec.name;
  }

  /**
   * Stores a new record. With `id` given it must be free (ConflictError otherwise); without, the
   * next free id of the scope is allocated (ids callers chose are skipped). `token`, when given,
   * is the creating call's token the record keeps in `_op` (else a random one): a job run
   * outside any flow keeps its coordinator's incarnation token there.
   */
  async create(input: CreateInput<T>, token: string = crypto.randomUUID()): Promise<T> {
    const { id: chosen, ...fields } = input;
    const rest = fields as unknown as Omit<T, Managed>;
    if (chosen !== undefined) {
      const record = this.build(rest, chosen);
      if (!(await this.insert(record, token))) throw new ConflictError(this.kind, describe(record));
      return record;
    }
    const counter = this.layout.counter(rest as unknown as Omit<RecordRef, "id">);
    for (let attempt = 0; attempt < MAX_ALLOCATION_ATTEMPTS; attempt++) {
      const id = Number(await callRedis(() => this.redis.exec<number>(["HINCRBY", counter.key, counter.field, "1"])));
      if (id > MAX_ID) throw new StoreError(`${this.kind} ids are exhausted in ${counter.key}`);
      const record = this.build(rest, id);
      if (await this.insert(record, token)) return record;
    }
    throw new StoreError(`could not allocate a free ${this.kind} id in ${counter.key}`);
  }

  /** Loads a record or throws NotFoundError. */
  async load(ref: RecordRef): Promise<T> {
    const found = await this.find(ref);
    if (!found) throw new NotFoundError(this.kind, describe(ref));
    return found;
  }

  /** Loads a record, or null when there is none. */
  async find(ref: RecordRef): Promise<T | null> {
    const key = this.layout.key(ref);
    const hash = await readHash(this.redis, key);
    return hash ? decodeRecord(this.layout.codec, key, hash) : null;
  }

  /** Whether each record exists (one round trip). */
  async exist(refs: RecordRef[]): Promise<boolean[]> {
    if (refs.length === 0) return [];
    const found = await callRedis(async () => {
      const p = this.redis.pipeline();
      for (const ref of refs) p.exists(this.layout.key(ref));
      return (await p.exec()) as number[];
    });
    return found.map((n) => Number(n) > 0);
  }

  /**
   * Applies a patch: the merged record is validated before anything is written, and only the
   * patched fields (plus `updated_at`) are written, so concurrent patches of different fields
   * do not undo each other.
   */
  async update(ref: RecordRef, patch: Patch<T>): Promise<T> {
    const current = await this.load(ref);
    const merged = { ...current, ...patch, updated_at: this.now() } as T;
    const parsed = this.layout.codec.schema.parse(merged);
    const changed = { ...patch, updated_at: parsed.updated_at } as Partial<T>;
    const removed = Object.keys(patch).filter((k) => (patch as Record<string, unknown>)[k] === undefined);
    const args = [removed.length, ...removed, ...encodePairs(this.layout.codec, changed)];
    const updated = await updateRecord.run(this.redis, [this.layout.key(ref)], args);
    if (updated !== 1) throw new NotFoundError(this.kind, describe(ref));
    return parsed;
  }

  /** Deletes a record and its index entry; NotFoundError when there was none. */
  async delete(ref: RecordRef): Promise<void> {
    const index = { key: this.layout.indexKey(ref), member: this.layout.indexMember(ref) };
    const keys = this.layout.indexInSlot ? [this.layout.key(ref), index.key] : [this.layout.key(ref)];
    const deleted = await deleteRecord.run(this.redis, keys, [index.member]);
    if (!this.layout.indexInSlot) await callRedis(() => this.redis.exec(["ZREM", index.key, index.member]));
    if (deleted !== 1) throw new NotFoundError(this.kind, describe(ref));
  }

  /**
   * Lists a scope's records in id order, `limit` at a time from `offset`. Index entries whose
   * record has gone (a delete that stopped half-way) are skipped.
   */
  async list(scope: Omit<RecordRef, "id">, offset = 0, limit = 50): Promise<Page<T>> {
    const { members, total } = await readIndexPage(this.redis, this.layout.indexKey(scope), offset, limit);
    const keys = members.map((member) => this.layout.key(parseMember(member, scope)));
    const hashes = await readHashes(this.redis, keys);
    const items = hashes.flatMap((hash, i) => (hash ? [decodeRecord(this.layout.codec, keys[i] as string, hash)] : []));
    return toPage(items, offset, members.length, total);
  }

  private build(rest: Omit<T, Managed>, id: number): T {
    const now = this.now();
    const filled = this.layout.withId ? this.layout.withId(rest, id) : rest;
    return this.layout.codec.schema.parse({ ...filled, id, created_at: now, updated_at: now });
  }

  /** Writes a complete new record; false when its key is already taken. */
  private async insert(record: T, token: string): Promise<boolean> {
    const key = this.layout.key(record);
    const index = { key: this.layout.indexKey(record), member: this.layout.indexMember(record) };
    const keys = this.layout.indexInSlot ? [key, index.key] : [key];
    const created = await createRecord.run(this.redis, keys, [
      index.member,
      record.id,
      token,
      ...encodePairs(this.layout.codec, record),
    ]);
    if (created !== 1) return false;
    // A global index is written after the record: at worst it briefly lags, never points ahead.
    if (!this.layout.indexInSlot)
      await callRedis(() => this.redis.exec(["ZADD", index.key, String(record.id), index.member]));
    return true;
  }
}

/** Index members are `<id>` or `<caller>:<id>`. */
function parseMember(member: string, scope: Omit<RecordRef, "id">): RecordRef {
  const parts = member.split(":").map(Number);
  return parts.length === 2
    ? { ...scope, caller_id: parts[0] as number, id: parts[1] as number }
    : { ...scope, id: parts[0] as number };
}

function describe(ref: RecordRef): string {
  const parts = [
    ref.context_id !== undefined ? `context ${ref.context_id}` : "",
    ref.caller_id !== undefined ? `caller ${ref.caller_id}` : "",
  ]
    .filter(Boolean)
    .join(", ");
  return parts ? `${ref.id} (${parts})` : String(ref.id);
}
