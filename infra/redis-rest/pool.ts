import type { Backend, TransactionReply, Watcher } from "./backend.js";
import type { Command } from "./commands.js";
import { RedisConnection, RedisUnavailableError, type RedisTarget } from "./connection.js";
import { ErrorReply, type Reply } from "./resp.js";

export interface PoolOptions {
  /** Most connections open at once; further requests wait for one to come back. */
  size: number;
  connectTimeoutMs: number;
  /** How long a request may wait for a free connection before it is answered 503. */
  acquireTimeoutMs: number;
}

interface Waiter {
  resolve: (connection: RedisConnection) => void;
  reject: (error: Error) => void;
  timer: NodeJS.Timeout;
}

/**
 * A bounded pool of Redis connections. A request holds one connection exclusively for its whole
 * batch, so a transaction's MULTI ... EXEC and a blocking command never interleave with another
 * request's commands. Broken connections are dropped, not returned; the next request reconnects.
 */
export class ConnectionPool implements Backend {
  private readonly idle: RedisConnection[] = [];
  private readonly waiters: Waiter[] = [];
  private open = 0;
  private closed = false;
  /** Batches run and the commands in them (MULTI and EXEC included): what this pool sent to Redis, for benchmarks. */
  readonly sent = { batches: 0, commands: 0 };
  /**
   * While set, each batch's commands are told to it, in the order they are sent (a test reads
   * which calls a request made, one request a round trip).
   */
  watcher: Watcher | undefined;

  constructor(
    private readonly target: RedisTarget,
    private readonly options: PoolOptions,
  ) {}

  /** Runs `commands` on one connection and returns their replies in order. */
  async run(commands: readonly (readonly (string | Buffer)[])[]): Promise<Reply[]> {
    this.sent.batches++;
    this.sent.commands += commands.length;
    this.watcher?.(commands);
    const connection = await this.acquire();
    try {
      return await connection.send(commands);
    } finally {
      this.release(connection);
    }
  }

  /** MULTI, the commands, EXEC: all on one connection, so nothing interleaves. */
  async transaction(commands: readonly Command[]): Promise<TransactionReply> {
    const replies = await this.run([["MULTI"], ...commands, ["EXEC"]]);
    const queued = replies.slice(1, -1).find((r) => r instanceof ErrorReply);
    return { exec: replies[replies.length - 1] ?? null, ...(queued instanceof ErrorReply ? { queued } : {}) };
  }

  /** Closes every idle connection and refuses new work; busy ones close when released. */
  close(): Promise<void> {
    this.closed = true;
    for (const connection of this.idle.splice(0)) connection.close();
    for (const waiter of this.waiters.splice(0)) {
      clearTimeout(waiter.timer);
      waiter.reject(new RedisUnavailableError("the REST endpoint is shutting down"));
    }
    return Promise.resolve();
  }

  private async acquire(): Promise<RedisConnection> {
    if (this.closed) throw new RedisUnavailableError("the REST endpoint is shutting down");
    for (let c = this.idle.pop(); c; c = this.idle.pop()) {
      if (!c.broken) return c;
      this.open--;
    }
    if (this.open < this.options.size) {
      this.open++;
      try {
        return await RedisConnection.open(this.target, this.options.connectTimeoutMs);
      } catch (error) {
        this.open--;
        this.wakeWaiter();
        throw error;
      }
    }
    return new Promise((resolve, reject) => {
      const waiter: Waiter = {
        resolve,
        reject,
        timer: setTimeout(() => {
          this.waiters.splice(this.waiters.indexOf(waiter), 1);
          reject(new RedisUnavailableError("no Redis connection became free in time"));
        }, this.options.acquireTimeoutMs),
      };
      this.waiters.push(waiter);
    });
  }

  private release(connection: RedisConnection): void {
    if (connection.broken || this.closed) {
      if (!connection.broken) connection.close();
      this.open--;
      this.wakeWaiter();
      return;
    }
    const waiter = this.waiters.shift();
    if (waiter) {
      clearTimeout(waiter.timer);
      waiter.resolve(connection);
    } else {
      this.idle.push(connection);
    }
  }

  /** A slot freed up without a connection to hand over: let the oldest waiter open its own. */
  private wakeWaiter(): void {
    const waiter = this.waiters.shift();
    if (!waiter) return;
    clearTimeout(waiter.timer);
    this.acquire().then(waiter.resolve, waiter.reject);
  }
}
