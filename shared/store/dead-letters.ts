import type { Keys } from "../keys.js";
import { DeadLetter } from "../model/index.js";
import { parseStored } from "./codec.js";
import { CorruptRecordError, NotFoundError } from "./errors.js";
import { readIndexPage, toPage, type Page } from "./reads.js";
import { callRedis, type Redis } from "./redis.js";
import { LuaScript } from "./script.js";

/**
 * addDeadLetter: keep one dead letter (entries from flows are written by commitFlow itself).
 *   KEYS[1]  the dead letters hash   KEYS[2]  their index
 *   ARGV[1]  id   ARGV[2]  the entry (JSON)   ARGV[3]  score (epoch ms)
 * Returns 1 added, 0 already there (a replay).
 */
const addDeadLetter = new LuaScript(
  "addDeadLetter",
  `if redis.call("HSETNX", KEYS[1], ARGV[1], ARGV[2]) == 0 then return 0 end
redis.call("ZADD", KEYS[2], ARGV[3], ARGV[1])
return 1`,
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

/** A context's dead letters: what the coordinator gave up on, newest first. */
export class DeadLetters {
  constructor(
    private readonly redis: Redis,
    private readonly keys: Keys,
  ) {}

  async add(entry: DeadLetter): Promise<void> {
    const ctx = entry.context_id;
    await addDeadLetter.run(
      this.redis,
      [this.keys.deadLetters(ctx), this.keys.deadLetterIndex(ctx)],
      [entry.id, JSON.stringify(entry), Date.now()],
    );
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
