import type { Keys } from "../keys.js";
import { DeadLetter } from "../model/index.js";
import { parseStored } from "./codec.js";
import { CorruptRecordError, NotFoundError } from "./errors.js";
import { readIndexPage, toPage, type Page } from "./reads.js";
import { callRedis, type Redis } from "./redis.js";
import { addDeadLetter, deleteDeadLetter } from "./scripts/dead-letters.js";
import { DEAD_LETTERS_MAX } from "./scripts/dead-letter-cap.js";

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
