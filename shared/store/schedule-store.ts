import type { Keys } from "../keys.js";
import { Schedule, type FlowStatus } from "../model/index.js";
import { decodeRecord, encodePairs, type RecordCodec } from "./codec.js";
import { NotFoundError } from "./errors.js";
import { readHash, readHashes, readIndexPage, toPage, type Page } from "./reads.js";
import { callRedis, type Redis } from "./redis.js";
import { createSchedule, deleteSchedule, updateSchedule } from "./scripts/schedule.js";

/** How each field of a schedule is kept in its hash. */
const codec: RecordCodec<Schedule> = {
  name: "schedule",
  schema: Schedule,
  fields: {
    id: "int",
    context_id: "int",
    creator_id: "int",
    cron: "str",
    timezone: "str",
    interval_seconds: "int",
    overlap: "str",
    catchup: "json",
    template: "json",
    from_template: "json",
    paused: "bool",
    paused_reason: "str",
    note: "str",
    anchor_ms: "int",
    next_fire_at: "int",
    last_fire_at: "int",
    created_at: "int",
    updated_at: "int",
  },
};

/** How long a schedule's Idempotency-Key is kept, as a flow submission's is (a day). */
const IDEMPOTENCY_TTL_SECONDS = 86_400;

/** What a new schedule is made of: everything but the id the store allocates. */
export type NewSchedule = Omit<Schedule, "id">;

/** A schedule as read, with its incarnation token (a record without one is no schedule this coordinator created). */
export interface StoredSchedule {
  record: Schedule;
  incarnation?: string;
}

/** The hash field of a schedule's incarnation token: a random id made when it is created. */
const INCARNATION_FIELD = "_op";

/** A change of a schedule: fields to set, and optional fields to clear. */
export interface SchedulePatch {
  set: Partial<Omit<Schedule, "id" | "context_id" | "created_at">>;
  clear?: ("paused_reason" | "next_fire_at")[];
}

/**
 * Schedules (docs/schedules.md): their records, listed per context, and `schedule:due`, the
 * global set of active schedules by next fire that the sweep reads as its backstop. The due set
 * is global (another cluster slot than any context), so it is written on its own, never in a
 * script with a context's keys; the Scheduler objects set it after each fire.
 */
export class ScheduleStore {
  constructor(
    private readonly redis: Redis,
    private readonly keys: Keys,
  ) {}

  /**
   * Stores a new schedule under the context's next schedule id; with an Idempotency-Key seen before (a retried create), creates nothing
   * and answers the schedule that key created (`existing`).
   */
  async create(
    input: NewSchedule,
    idempotency?: { key: string; digest: string },
  ): Promise<{ schedule: Schedule; existing: false } | { existing: true; id: number; digest: string }> {
    const ctx = input.context_id;
    // A schedule under an id given again (Redis flushed) is another incarnation: its Scheduler
    // tells it from the one it remembers by this token.
    const pairs = [...encodePairs<Schedule>(codec, input), INCARNATION_FIELD, crypto.randomUUID()];
    // The id is taken first, so that the script is given the schedule's key; a create that finds
    // its Idempotency-Key seen leaves that id unused.
    const taken = await callRedis(() =>
      this.redis.exec<number>(["HINCRBY", this.keys.ids(ctx), this.keys.scheduleCounter(), "1"]),
    );
    const keys = [this.keys.schedule(ctx, Number(taken)), this.keys.scheduleIndex(ctx)];
    if (idempotency) keys.push(this.keys.scheduleIdempotency(ctx, input.creator_id, idempotency.key));
    const [seen, answer] = (await createSchedule.run(this.redis, keys, [
      Number(taken),
      IDEMPOTENCY_TTL_SECONDS,
      idempotency?.digest ?? "",
      ...pairs,
    ])) as [number, string];
    if (Number(seen) !== 1) return { schedule: { ...input, id: Number(answer) }, existing: false };
    const [id, digest] = String(answer).split(":");
    return { existing: true, id: Number(id), digest: digest ?? "" };
  }

  /** One schedule; NotFoundError when there is none. */
  async load(contextId: number, id: number): Promise<Schedule> {
    const found = await this.find(contextId, id);
    if (!found) throw new NotFoundError("schedule", `${id} in context ${contextId}`);
    return found;
  }

  /** One schedule, or null when there is none. */
  async find(contextId: number, id: number): Promise<Schedule | null> {
    return (await this.findStored(contextId, id))?.record ?? null;
  }

  /** One schedule with its incarnation token (one command), or null when there is none. */
  async findStored(contextId: number, id: number): Promise<StoredSchedule | null> {
    const key = this.keys.schedule(contextId, id);
    const hash = await readHash(this.redis, key);
    if (!hash) return null;
    const token = hash[INCARNATION_FIELD];
    return { record: decodeRecord(codec, key, hash), ...(token !== undefined ? { incarnation: token } : {}) };
  }

  /** A page of a context's schedules by id (two round trips). */
  async list(contextId: number, offset: number, limit: number): Promise<Page<Schedule>> {
    const { members, total } = await readIndexPage(this.redis, this.keys.scheduleIndex(contextId), offset, limit);
    const keys = members.map((m) => this.keys.schedule(contextId, Number(m)));
    const hashes = await readHashes(this.redis, keys);
    const items = hashes.flatMap((h, i) => (h ? [decodeRecord(codec, keys[i] as string, h)] : []));
    return toPage(items, offset, members.length, total);
  }

  /** Changes a schedule that exists; NotFoundError when it is gone. */
  async update(contextId: number, id: number, patch: SchedulePatch): Promise<void> {
    const pairs = encodePairs<Schedule>(codec, patch.set);
    const changed = await updateSchedule.run(
      this.redis,
      [this.keys.schedule(contextId, id)],
      [pairs.length / 2, ...pairs, ...(patch.clear ?? [])],
    );
    if (Number(changed) === 0) throw new NotFoundError("schedule", `${id} in context ${contextId}`);
  }

  /** Deletes a schedule's record and index entry, and takes it out of the due set; true when it existed. */
  async remove(contextId: number, id: number): Promise<boolean> {
    const deleted = await deleteSchedule.run(
      this.redis,
      [this.keys.schedule(contextId, id), this.keys.scheduleIndex(contextId)],
      [id],
    );
    await this.setDue(contextId, id, undefined);
    return Number(deleted) === 1;
  }

  /** Sets when a schedule next fires in the due set (epoch ms); undefined takes it out (paused, gone). */
  async setDue(contextId: number, id: number, atMs: number | undefined): Promise<void> {
    const member = this.keys.scheduleDueMember(contextId, id);
    await callRedis(() =>
      atMs === undefined
        ? this.redis.exec(["ZREM", this.keys.scheduleDue(), member])
        : this.redis.exec(["ZADD", this.keys.scheduleDue(), String(atMs), member]),
    );
  }

  /** Schedules whose next fire is at or before `beforeMs`, at most `limit` (one command). */
  async due(beforeMs: number, limit: number): Promise<{ contextId: number; scheduleId: number }[]> {
    const members = await callRedis(() =>
      this.redis.exec<string[]>([
        "ZRANGEBYSCORE",
        this.keys.scheduleDue(),
        "-inf",
        String(beforeMs),
        "LIMIT",
        "0",
        String(limit),
      ]),
    );
    return members.flatMap((m) => this.keys.parseScheduleDueMember(String(m)) ?? []);
  }

  /**
   * The status of each of these flows of a context (one round trip): how a schedule tells
   * whether the runs it started are still going. A flow that no longer exists is null.
   */
  async flowStatuses(contextId: number, flowIds: number[]): Promise<(FlowStatus | null)[]> {
    if (flowIds.length === 0) return [];
    const statuses = await callRedis(async () => {
      const p = this.redis.pipeline();
      for (const id of flowIds) p.hget(this.keys.flow(contextId, id), "status");
      return (await p.exec()) as (string | null)[];
    });
    return statuses.map((s) => (s === null ? null : (String(s) as FlowStatus)));
  }
}
