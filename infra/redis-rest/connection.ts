import net from "node:net";
import { encodeCommand, ErrorReply, ReplyParser, type Reply } from "./resp.js";

/** Where and how to reach redis-server, parsed from a `redis://` URL. */
export interface RedisTarget {
  host: string;
  port: number;
  username?: string;
  password?: string;
  db: number;
}

/** Redis could not be reached, or the connection broke while a command was in flight. */
export class RedisUnavailableError extends Error {
  override name = "RedisUnavailableError";
}

/**
 * Parses `redis://[user:password@]host[:port][/db]`. TLS (`rediss://`) is refused: the endpoint
 * fronts a local redis-server, and a silent plain-text fallback would be worse than an error.
 */
export function parseRedisUrl(url: string): RedisTarget {
  let parsed: URL;
  try {
    parsed = new URL(url);
  } catch {
    throw new Error(`REDIS_URL is not a URL: ${url}`);
  }
  if (parsed.protocol !== "redis:") {
    throw new Error(`REDIS_URL must start with redis:// (got ${parsed.protocol}//)`);
  }
  const db = parsed.pathname.length > 1 ? Number(parsed.pathname.slice(1)) : 0;
  if (!Number.isInteger(db) || db < 0) throw new Error(`REDIS_URL names a bad database: ${url}`);
  return {
    host: parsed.hostname.replace(/^\[|\]$/g, "") || "127.0.0.1",
    port: parsed.port ? Number(parsed.port) : 6379,
    ...(parsed.username ? { username: decodeURIComponent(parsed.username) } : {}),
    ...(parsed.password ? { password: decodeURIComponent(parsed.password) } : {}),
    db,
  };
}

interface Pending {
  count: number;
  replies: Reply[];
  resolve: (replies: Reply[]) => void;
  reject: (error: Error) => void;
}

/**
 * One socket to redis-server. `send` writes a batch of commands in one write and resolves with
 * their replies once all have arrived; batches are answered in the order they were sent.
 */
export class RedisConnection {
  private readonly parser = new ReplyParser();
  private readonly pending: Pending[] = [];
  private closedWith: Error | null = null;

  private constructor(private readonly socket: net.Socket) {
    socket.on("data", (chunk: Buffer) => this.onData(chunk));
    socket.on("error", (error) => this.fail(new RedisUnavailableError(error.message)));
    socket.on("close", () => this.fail(new RedisUnavailableError("connection to Redis closed")));
  }

  /** Opens a connection, authenticates and selects the database the target names. */
  static async open(target: RedisTarget, connectTimeoutMs: number): Promise<RedisConnection> {
    const socket = await new Promise<net.Socket>((resolve, reject) => {
      const s = net.connect({ host: target.host, port: target.port });
      const timer = setTimeout(() => {
        s.destroy();
        reject(new RedisUnavailableError(`connecting to Redis at ${target.host}:${target.port} timed out`));
      }, connectTimeoutMs);
      s.once("connect", () => {
        clearTimeout(timer);
        resolve(s);
      });
      s.once("error", (error) => {
        clearTimeout(timer);
        reject(new RedisUnavailableError(`cannot reach Redis at ${target.host}:${target.port}: ${error.message}`));
      });
    });
    socket.setNoDelay(true);
    socket.setKeepAlive(true, 10_000);
    const connection = new RedisConnection(socket);
    const setup: string[][] = [];
    if (target.password !== undefined) {
      setup.push(target.username ? ["AUTH", target.username, target.password] : ["AUTH", target.password]);
    }
    if (target.db !== 0) setup.push(["SELECT", String(target.db)]);
    if (setup.length > 0) {
      const replies = await connection.send(setup);
      const failed = replies.find((r) => r instanceof ErrorReply);
      if (failed instanceof ErrorReply) {
        connection.close();
        throw new RedisUnavailableError(`Redis refused the connection setup: ${failed.message}`);
      }
    }
    return connection;
  }

  /** True once the socket failed or was closed; such a connection must not be reused. */
  get broken(): boolean {
    return this.closedWith !== null;
  }

  /** Sends the commands in one write; resolves with one reply per command. */
  send(commands: readonly (readonly (string | Buffer)[])[]): Promise<Reply[]> {
    if (this.closedWith) return Promise.reject(this.closedWith);
    return new Promise((resolve, reject) => {
      this.pending.push({ count: commands.length, replies: [], resolve, reject });
      this.socket.write(Buffer.concat(commands.map((c) => encodeCommand(c))));
    });
  }

  close(): void {
    this.fail(new RedisUnavailableError("connection closed"));
  }

  private onData(chunk: Buffer): void {
    let replies: Reply[];
    try {
      replies = this.parser.push(chunk);
    } catch (error) {
      this.fail(new RedisUnavailableError(`bad reply from Redis: ${(error as Error).message}`));
      return;
    }
    for (const reply of replies) {
      const head = this.pending[0];
      if (!head) {
        this.fail(new RedisUnavailableError("Redis sent a reply nobody asked for"));
        return;
      }
      head.replies.push(reply);
      if (head.replies.length === head.count) {
        this.pending.shift();
        head.resolve(head.replies);
      }
    }
  }

  private fail(error: Error): void {
    if (this.closedWith) return;
    this.closedWith = error;
    this.socket.destroy();
    for (const p of this.pending.splice(0)) p.reject(error);
  }
}
