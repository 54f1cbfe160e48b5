import type { Keys } from "../keys.js";
import { DeadLetter } from "../model/index.js";
import { parseStored } from "./codec.js";
import { CorruptRecordError, NotFoundError } from "./errors.js";
import { readIndexPage, toPage, type Page } from "./reads.js";
import { callRedis, type Redis } from "./redis.js";
import { LuaScript } from "./script.js";
import { DEAD_LETTERS_MAX, KEEP_DEAD_LETTER } from "./scripts/dead-letter-cap.js";

/**
 * addDeadLetter: keep one dead letter (entries from flows are written by commitFlow itself),
 * within the context's cap: past it the oldest are dropped and counted (scripts/dead-letter-cap.ts).
 *   KEYS[1]  the dead letters hash   KEYS[2]  their index
 *   KEYS[3]  the context hash (its `retention` may set the cap)   KEYS[4]  the context's counters
 *   ARGV[1]  id   ARGV[2]  the entry (JSON)   ARGV[3]  score (epoch ms)
 *   ARGV[4]  the deployment's cap (DEAD_LETTERS_MAX)
 * Returns 1 added, 0 already there (a replay: nothing written, nothing dropped).
 */
const addDeadLetter = new LuaScript(
  "addDeadLetter",
  `${KEEP_DEAD_LETTER}
return keepDeadLetter(KEYS[1], KEYS[2], KEYS[3], KEYS[4], ARGV[1], ARGV[2], ARGV[3], ARGV[4])`,
);

/**
 * deleteDeadLetter: remove one dead letter and its index entry. Idempotent.
 *   KEYS[1]  the dead letters hash   KEYS[2]  their index
 *   ARGV[1]  id
 * Returns 1 deleted, 0 already gone.
 */
const deleteDeadLetter = new LuaScript(
  "deleteDeadLetter",
  `redis.call("ZREM", KEYS[2], ARGV[1])
return redis.call("HDEL", KEYS[1], ARGV[1])`,
);

function parse(key: string, text: string): DeadLetter {
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch {
    throw new CorruptRecordError(key, [{ field: "(entry)", message: "not valid JSON" }]);
  }
  return parseStored(DeadLetter, key, value, "(entry)");
}

/**
 * A context's dead letters: what the coordinator gave up on, newest first, at most `max` of them
 * (the deployment's cap; a context's `retention.dead_letters` overrides it).
 */
export class DeadLetters {
  constructor(
    private readonly redis: Redis,
    private readonly keys: Keys,
    readonly max: number = DEAD_LETTERS_MAX,
  ) {}

  /** Keeps a letter (once: a replay with the same id writes nothing); past the cap the oldest go. */
  async add(entry: DeadLetter): Promise<void> {
    const ctx = entry.context_id;
    await addDeadLetter.run(
      this.redis,
      [
        this.keys.deadLetters(ctx),
        this.keys.deadLetterIndex(ctx),
        this.keys.context(ctx),
        this.keys.contextCounters(ctx),
      ],
      [entry.id, JSON.stringify(entry), Date.now(), this.max],
    );
  }

  /** Deletes a letter and its index entry; true when it was there (deleting it again is no error). */
  async remove(contextId: number, id: string): Promise<boolean> {
    const deleted = await deleteDeadLetter.run(
      this.redis,
      [this.keys.deadLetters(contextId), this.keys.deadLetterIndex(contextId)],
      [id],
    );
    return Number(deleted) === 1;
  }

  async list(contextId: number, offset: number, limit: number): Promise<Page<DeadLetter>> {
    const { members: ids, total } = await readIndexPage(
      this.redis,
      this.keys.deadLetterIndex(contextId),
      offset,
      limit,
      true,
    );
    if (ids.length === 0) return toPage([], offset, 0, total);
    const values = await callRedis(() =>
      this.redis.exec<(string | null)[]>(["HMGET", this.keys.deadLetters(contextId), ...ids]),
    );
    const items = values.flatMap((v, i) =>
      v === null ? [] : [parse(`${this.keys.deadLetters(contextId)}#${ids[i]}`, v)],
    );
    return toPage(items, offset, ids.length, total);
  }

  async load(contextId: number, id: string): Promise<DeadLetter> {
    const text = await callRedis(() => this.redis.exec<string | null>(["HGET", this.keys.deadLetters(contextId), id]));
    if (text === null) throw new NotFoundError("dead letter", id);
    return parse(`${this.keys.deadLetters(contextId)}#${id}`, text);
  }
}
