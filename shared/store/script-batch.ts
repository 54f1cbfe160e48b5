import type { Redis } from "./redis.js";
import { callRedis } from "./redis.js";
import type { LuaScript } from "./script.js";

/** A raw reply as a pipeline hands it over with deserialization off. */
export type Reply = string | number | null | Reply[];

/** Commands queued on a pipeline, counted, with the positions of the script calls among them. */
export class ScriptBatch {
  private queued = 0;
  /** Position in the batch → the script and its KEYS and ARGV. */
  readonly scripts = new Map<number, [LuaScript, string[], string[]]>();

  constructor(
    readonly pipeline: ReturnType<Redis["pipeline"]>,
    private readonly shas: ReadonlyMap<LuaScript, string>,
  ) {}

  zcount(key: string, min: string, max: number): void {
    this.queue().zcount(key, min, max);
  }

  zcard(key: string): void {
    this.queue().zcard(key);
  }

  zrange(key: string, start: number, stop: number): void {
    this.queue().zrange(key, start, stop);
  }

  hgetall(key: string): void {
    this.queue().hgetall(key);
  }

  hincrby(key: string, field: string, by: number): void {
    this.queue().hincrby(key, field, by);
  }

  /** EVALSHA of one of the scripts the batch was made for. */
  script(script: LuaScript, keys: string[], args: string[]): void {
    const sha = this.shas.get(script);
    if (sha === undefined) throw new Error(`script ${script.name} is not one of this batch's`);
    this.scripts.set(this.queued, [script, keys, args]);
    this.queue().evalsha(sha, keys, args);
  }

  private queue(): ReturnType<Redis["pipeline"]> {
    this.queued++;
    return this.pipeline;
  }
}

/**
 * Runs batches of plain commands and EVALSHAs of a fixed set of scripts as one pipeline each. A
 * script Redis does not know yet (NOSCRIPT: a fresh or flushed Redis) is loaded and only those
 * calls are sent again, so the commands beside them (counters) are never applied twice.
 */
export class ScriptPipeline {
  private shas: Promise<Map<LuaScript, string>> | undefined;

  constructor(
    private readonly redis: Redis,
    private readonly scripts: readonly LuaScript[],
  ) {}

  /** Runs what `build` queues as one pipeline and returns its replies, in order. */
  async run(build: (batch: ScriptBatch) => void): Promise<Reply[]> {
    const shas = await (this.shas ??= shasOf(this.scripts));
    return callRedis(async () => {
      const batch = new ScriptBatch(this.redis.pipeline(), shas);
      build(batch);
      const results = (await batch.pipeline.exec({ keepErrors: true })) as { result: Reply; error?: string }[];
      const failed = results.find((r) => r.error !== undefined && !r.error.startsWith("NOSCRIPT"));
      if (failed) throw new Error(failed.error);
      const missing = [...batch.scripts].filter(([at]) => results[at]?.error !== undefined);
      if (missing.length === 0) return results.map((r) => r.result);
      for (const script of new Set(missing.map(([, [s]]) => s)))
        await this.redis.exec(["SCRIPT", "LOAD", script.source]);
      const again = new ScriptBatch(this.redis.pipeline(), shas);
      for (const [, [script, keys, args]] of missing) again.script(script, keys, args);
      const redone = (await again.pipeline.exec()) as Reply[];
      missing.forEach(([at], i) => (results[at] = { result: redone[i] as Reply }));
      return results.map((r) => r.result);
    });
  }
}

async function shasOf(scripts: readonly LuaScript[]): Promise<Map<LuaScript, string>> {
  return new Map(await Promise.all(scripts.map(async (s) => [s, await sha1(s.source)] as const)));
}

/** The SHA-1 Redis knows a script by (EVALSHA). */
async function sha1(source: string): Promise<string> {
  const digest = await crypto.subtle.digest("SHA-1", new TextEncoder().encode(source));
  return [...new Uint8Array(digest)].map((b) => b.toString(16).padStart(2, "0")).join("");
}
