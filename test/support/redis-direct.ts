import { parseRedisUrl, RedisConnection } from "../../infra/redis-rest/connection.js";
import { ErrorReply, StatusReply, type Reply } from "../../infra/redis-rest/resp.js";

/**
 * A connection straight to a private stack's redis-server (RESP, not through the REST endpoint),
 * for tests that look at Redis itself: what it holds and how much memory it uses. Its commands
 * are not counted by the REST endpoint (`restSent`), so reading through it disturbs no count
 * of what the Worker sends.
 */
export class DirectRedis {
  private constructor(private readonly connection: RedisConnection) {}

  /** Connects to `redis://…` (a private stack's `redisUrl`). */
  static async open(url: string): Promise<DirectRedis> {
    return new DirectRedis(await RedisConnection.open(parseRedisUrl(url), 2_000));
  }

  /** One command's reply, bulk strings as text; a Redis error is thrown. */
  async call(...args: string[]): Promise<unknown> {
    const [reply] = await this.connection.send([args]);
    return decode(reply ?? null);
  }

  /** An INFO section as its fields (`used_memory` → "123"). */
  async info(section: string): Promise<Map<string, string>> {
    const fields = new Map<string, string>();
    for (const line of String(await this.call("INFO", section)).split("\r\n")) {
      const at = line.indexOf(":");
      if (at > 0 && !line.startsWith("#")) fields.set(line.slice(0, at), line.slice(at + 1));
    }
    return fields;
  }

  /**
   * Every key with its time to live (ms; -1: none, it stays until deleted), found by SCAN to
   * the end of its cursor. SCAN also removes expired keys it comes across.
   */
  async keysWithTtl(match = "*"): Promise<Map<string, number>> {
    const names = new Set<string>();
    let cursor = "0";
    do {
      const [next, batch] = (await this.call("SCAN", cursor, "MATCH", match, "COUNT", "1000")) as [string, string[]];
      cursor = next;
      for (const key of batch) names.add(key);
    } while (cursor !== "0");
    const keys = [...names];
    const ttls = keys.length > 0 ? await this.connection.send(keys.map((key) => ["PTTL", key])) : [];
    const found = new Map<string, number>();
    keys.forEach((key, i) => {
      const ttl = Number(decode(ttls[i] ?? null));
      if (ttl !== -2) found.set(key, ttl); // -2: expired or deleted since the SCAN
    });
    return found;
  }

  /** What MEMORY USAGE estimates each of `keys` takes (bytes), summed. */
  async memoryUsage(keys: string[]): Promise<number> {
    if (keys.length === 0) return 0;
    const replies = await this.connection.send(keys.map((key) => ["MEMORY", "USAGE", key, "SAMPLES", "0"]));
    return replies.reduce<number>((sum, reply) => sum + Number(decode(reply) ?? 0), 0);
  }

  close(): void {
    this.connection.close();
  }
}

function decode(reply: Reply): unknown {
  if (reply instanceof ErrorReply) throw new Error(`Redis: ${reply.message}`);
  if (Buffer.isBuffer(reply)) return reply.toString("utf8");
  if (Array.isArray(reply)) return reply.map(decode);
  if (reply instanceof StatusReply) return reply.value;
  return reply;
}

/** Redis as a whole at one moment: its keys, with and without a time to live, and its memory. */
export interface RedisSnapshot {
  /** Keys that stay until deleted. */
  persistent: Set<string>;
  /** Keys that expire by themselves (signature nonces, tickets, idempotency keys), with their TTL (ms). */
  volatile: Map<string, number>;
  dbsize: number;
  /**
   * INFO memory's used_memory less the clients' buffers (mem_clients_normal): the data and
   * Redis's own structures, without what the connections open at that moment hold (the REST
   * endpoint keeps the connections a burst opened, idle).
   */
  memory: number;
  /** What MEMORY USAGE says the volatile keys take. */
  volatileBytes: number;
  /** The INFO memory fields behind `memory`, to print. */
  info: Record<string, number>;
  /** What MEMORY USAGE says each persistent key takes (bytes). */
  perKey: Map<string, number>;
}

const MEMORY_FIELDS = [
  "used_memory",
  "mem_clients_normal",
  "used_memory_dataset",
  "used_memory_overhead",
  "used_memory_scripts_eval",
];

/**
 * Takes a snapshot of the memory, then of the keys (SCAN, which also drops expired keys it
 * meets). Redis accounts for a connection's buffers in mem_clients_normal only when its cron
 * comes by (each connection about once a second); until then what a connection's buffers grew
 * or shrank by shows in the rest of used_memory. So the memory is read a second after this
 * connection was last used, through a connection of its own, the same at every snapshot.
 */
export async function redisSnapshot(redis: DirectRedis, url: string): Promise<RedisSnapshot> {
  await new Promise((r) => setTimeout(r, 1_100));
  const reader = await DirectRedis.open(url);
  const fields = await reader.info("memory");
  const info = Object.fromEntries(MEMORY_FIELDS.map((f) => [f, Number(fields.get(f))]));
  info.connected_clients = Number((await reader.info("clients")).get("connected_clients"));
  info.slowlog = Number(await reader.call("SLOWLOG", "LEN"));
  reader.close();
  const keys = await redis.keysWithTtl();
  const persistent = new Set([...keys].filter(([, ttl]) => ttl === -1).map(([key]) => key));
  const volatile = new Map([...keys].filter(([, ttl]) => ttl >= 0));
  const dbsize = Number(await redis.call("DBSIZE"));
  const volatileBytes = await redis.memoryUsage([...volatile.keys()]);
  return {
    persistent,
    volatile,
    dbsize,
    memory: (info.used_memory ?? Number.NaN) - (info.mem_clients_normal ?? Number.NaN),
    volatileBytes,
    info,
    perKey: new Map(await Promise.all([...persistent].map(async (k) => [k, await redis.memoryUsage([k])] as const))),
  };
}
