import type { Redis } from "./redis.js";
import { callRedis } from "./redis.js";

/** A raw reply of a Lua script as the client hands it over with deserialization off. */
export type ScriptReply = string | number | null | ScriptReply[];

/**
 * A Lua script, shipped as a TS string and run with EVALSHA (EVAL when Redis has not seen it
 * yet). Every multi-key change of state is one of these, so it happens all or nothing.
 */
export class LuaScript {
  private readonly cache = new WeakMap<Redis, ReturnType<Redis["createScript"]>>();

  constructor(
    readonly name: string,
    readonly source: string,
  ) {}

  /** Runs the script; storage failures come back as the store's named errors. */
  run(redis: Redis, keys: string[], args: (string | number)[]): Promise<ScriptReply> {
    let script = this.cache.get(redis);
    if (!script) {
      script = redis.createScript<ScriptReply>(this.source);
      this.cache.set(redis, script);
    }
    const loaded = script;
    return callRedis(() => loaded.exec(keys, args.map(String)) as Promise<ScriptReply>);
  }
}

/**
 * The KEYS of a script call, gathered while its arguments are built: `at(key)` is the key's
 * position (1-based, as Lua indexes KEYS), the same each time the key is named again.
 */
export class ScriptKeys {
  readonly list: string[] = [];
  private readonly positions = new Map<string, number>();

  /** Keys already in the call (their positions as given), which `at` answers for too. */
  constructor(first: readonly string[] = []) {
    for (const key of first) this.at(key);
  }

  at(key: string): number {
    let p = this.positions.get(key);
    if (p === undefined) {
      p = this.list.push(key);
      this.positions.set(key, p);
    }
    return p;
  }
}
