import type * as IoRedis from "ioredis";
import type { Cluster, ClusterOptions, Command as IoCommand } from "ioredis";
import type { Backend, TransactionReply, Watcher } from "./backend.js";
import type { Command } from "./commands.js";
import { parseRedisUrl, RedisUnavailableError } from "./connection.js";
import { ErrorReply, StatusReply, type Reply } from "./resp.js";

/** Where a cluster is and how long a request may wait for it. */
export interface ClusterTarget {
  /** `host:port,…` (or `redis://[user:password@]host:port,…`): nodes to learn the cluster from. */
  seeds: string;
  connectTimeoutMs: number;
  /** How long one request may take, retries through a failover included, before it is answered 503. */
  requestTimeoutMs: number;
}

/** Redis's own refusal of keys in more than one slot, as a cluster node words it. */
export const CROSSSLOT = "CROSSSLOT Keys in request don't hash to the same slot";

/**
 * Commands without keys that mean the whole database: sent to every master (the first one's
 * reply is the answer). Any other command without keys goes to one master (SCAN, DBSIZE, INFO
 * see that node only).
 */
const EVERY_MASTER = new Set(["FLUSHALL", "FLUSHDB", "SCRIPT LOAD", "SCRIPT FLUSH"]);

/**
 * Refusals that say the slot has no master that can take the command now (a failover under way,
 * a node loading its data, a replica reached before the client learned the new layout, a master
 * short of the replicas `min-replicas-to-write` asks for), as opposed to refusals of the command.
 */
const UNAVAILABLE = /^(CLUSTERDOWN|MASTERDOWN|LOADING|TRYAGAIN|MOVED|ASK|READONLY|NOREPLICAS)\b/;

/**
 * A Redis Cluster behind the endpoint, through ioredis' `Cluster`: it routes each command to the
 * master of its key's slot, follows MOVED and ASK, learns a failover (its replica promoted) and
 * retries meanwhile. What the endpoint adds:
 * - a pipeline's commands are sent one by one (each routed and retried on its own), all at once,
 *   and their replies put back in the request's order; commands of one slot reach its master in
 *   the order sent, as a pipeline's would;
 * - a transaction must keep to one slot (else Redis's CROSSSLOT, before anything is sent); a
 *   script's keys are checked by the node that runs it (the same error);
 * - storage that cannot answer (the slot's master gone and not replaced yet, retries spent, the
 *   request past `requestTimeoutMs`) fails the whole request with RedisUnavailableError (503),
 *   as a broken connection does on a single server.
 */
export class ClusterBackend implements Backend {
  readonly sent = { batches: 0, commands: 0 };
  watcher: Watcher | undefined;
  private closed = false;

  private constructor(
    private readonly cluster: Cluster,
    private readonly io: typeof IoRedis,
    private readonly requestTimeoutMs: number,
  ) {}

  /** Connects to the cluster the seeds name (ioredis is loaded only for a cluster). */
  static async open(target: ClusterTarget): Promise<ClusterBackend> {
    const io = await import("ioredis");
    const seeds = parseSeeds(target.seeds);
    const options: ClusterOptions = {
      lazyConnect: true,
      scaleReads: "master",
      slotsRefreshTimeout: target.connectTimeoutMs,
      redisOptions: {
        connectTimeout: target.connectTimeoutMs,
        ...(seeds.username ? { username: seeds.username } : {}),
        ...(seeds.password ? { password: seeds.password } : {}),
      },
    };
    const cluster = new io.Cluster(seeds.nodes, options);
    // A node lost is reported by the commands that needed it; the client logs nothing itself.
    cluster.on("error", () => undefined);
    try {
      await cluster.connect();
    } catch (error) {
      cluster.disconnect();
      throw new RedisUnavailableError(`cannot reach the Redis Cluster at ${target.seeds}: ${(error as Error).message}`);
    }
    return new ClusterBackend(cluster, io, target.requestTimeoutMs);
  }

  async run(commands: readonly Command[]): Promise<Reply[]> {
    this.count(commands, commands.length);
    return this.within(async () => {
      const settled = await Promise.allSettled(commands.map((command) => this.send(command)));
      const failed = settled.find((s) => s.status === "rejected" && !isCommandError(s.reason));
      if (failed) throw unavailable((failed as PromiseRejectedResult).reason);
      return settled.map((s) => (s.status === "fulfilled" ? s.value : new ErrorReply(errorText(s.reason))));
    });
  }

  async transaction(commands: readonly Command[]): Promise<TransactionReply> {
    this.count([["MULTI"], ...commands, ["EXEC"]], commands.length + 2);
    const queued = commands.map((command) => this.command(command));
    if (new Set(queued.flatMap((c) => c.getKeys().map(() => c.getSlot()))).size > 1) {
      return {
        exec: new ErrorReply("EXECABORT Transaction discarded because of previous errors"),
        queued: new ErrorReply(CROSSSLOT),
      };
    }
    return this.within(async () => {
      const multi = this.cluster.multi();
      for (const [name, ...args] of commands) multi.callBuffer(String(name).toUpperCase(), ...args);
      try {
        const results = (await multi.exec()) ?? [];
        return { exec: results.map(([error, value]) => (error ? new ErrorReply(errorText(error)) : toReply(value))) };
      } catch (error) {
        if (!isCommandError(error)) throw unavailable(error);
        const cause = (error as { previousErrors?: unknown[] }).previousErrors?.[0];
        return {
          exec: new ErrorReply(errorText(error)),
          ...(cause ? { queued: new ErrorReply(errorText(cause)) } : {}),
        };
      }
    });
  }

  close(): Promise<void> {
    this.closed = true;
    this.cluster.disconnect();
    return Promise.resolve();
  }

  /** One command, routed by its key's slot (any master without one, every master for EVERY_MASTER). */
  private async send(args: Command): Promise<Reply> {
    const name = args.length > 1 ? `${args[0]} ${args[1]}`.toUpperCase() : "";
    if (EVERY_MASTER.has(name) || EVERY_MASTER.has(String(args[0]).toUpperCase())) {
      const replies = await Promise.all(
        this.cluster.nodes("master").map((node) => node.sendCommand(this.command(args))),
      );
      return toReply(replies[0]);
    }
    return toReply(await this.cluster.sendCommand(this.command(args)));
  }

  /**
   * An ioredis command whose replies stay bytes (RESP's bulk strings as Buffers, as pool.ts keeps
   * them), named in capitals: ioredis reshapes the arguments and replies of some commands by their
   * lower-case names (HGETALL's reply into an object, HSET's object argument), which the wire
   * form must not see; key positions (the routing) are looked up in any case.
   */
  private command([name, ...args]: Command): IoCommand {
    return new this.io.Command(String(name).toUpperCase(), args, { replyEncoding: null });
  }

  private count(commands: readonly Command[], n: number): void {
    this.sent.batches++;
    this.sent.commands += n;
    this.watcher?.(commands);
  }

  /** Runs `work` within the request's time; past it, or once closed, the request is answered 503. */
  private async within<T>(work: () => Promise<T>): Promise<T> {
    if (this.closed) throw new RedisUnavailableError("the REST endpoint is shutting down");
    let timer: NodeJS.Timeout | undefined;
    const late = new Promise<never>((_, reject) => {
      timer = setTimeout(
        () => reject(new RedisUnavailableError(`the Redis Cluster did not answer within ${this.requestTimeoutMs} ms`)),
        this.requestTimeoutMs,
      );
    });
    try {
      return await Promise.race([work(), late]);
    } finally {
      clearTimeout(timer);
    }
  }
}

/** Parses REDIS_CLUSTER: `host:port` or `redis://[user:password@]host:port` entries, comma-separated. */
export function parseSeeds(seeds: string): {
  nodes: { host: string; port: number }[];
  username?: string;
  password?: string;
} {
  const entries = seeds
    .split(",")
    .map((s) => s.trim())
    .filter(Boolean);
  if (entries.length === 0) throw new Error("REDIS_CLUSTER names no node (host:port,…)");
  const targets = entries.map((entry) => parseRedisUrl(entry.includes("://") ? entry : `redis://${entry}`));
  if (targets.some((t) => t.db !== 0))
    throw new Error("a Redis Cluster has database 0 only: REDIS_CLUSTER names another");
  const credentials = targets.find((t) => t.password !== undefined);
  return {
    nodes: targets.map((t) => ({ host: t.host, port: t.port })),
    ...(credentials?.username ? { username: credentials.username } : {}),
    ...(credentials?.password ? { password: credentials.password } : {}),
  };
}

/** A Redis refusal of the command itself (a reply error that is not about the slot's availability). */
function isCommandError(error: unknown): boolean {
  return (error as Error | undefined)?.name === "ReplyError" && !UNAVAILABLE.test(errorText(error));
}

function errorText(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
}

function unavailable(error: unknown): RedisUnavailableError {
  return error instanceof RedisUnavailableError ? error : new RedisUnavailableError(errorText(error));
}

const OK = Buffer.from("OK");

/**
 * ioredis' reply as pool.ts would give it: bytes, numbers, nil, errors in their place in arrays.
 * Its bytes do not tell a status from a bulk string; `OK` is taken for the status (sent bare in
 * base64 answers, as Upstash does), which reads back the same either way.
 */
function toReply(value: unknown): Reply {
  if (value === null || value === undefined) return null;
  if (Buffer.isBuffer(value)) return value.equals(OK) ? new StatusReply("OK") : value;
  if (typeof value === "number") return value;
  if (Array.isArray(value)) return value.map(toReply);
  if (value instanceof Error) return new ErrorReply(value.message);
  return Buffer.from(String(value), "utf8");
}
