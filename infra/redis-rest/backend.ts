import type { Command } from "./commands.js";
import type { ErrorReply, Reply } from "./resp.js";

/** What a transaction came to: EXEC's reply, and the first error a command got while queued (an EXECABORT's cause). */
export interface TransactionReply {
  exec: Reply;
  queued?: ErrorReply;
}

/** The commands of each request, told in the order they are sent (see `RestServer.record`). */
export type Watcher = (commands: readonly (readonly (string | Buffer)[])[]) => void;

/**
 * Where the endpoint's commands go: one redis-server through a pool of connections (pool.ts) or
 * a Redis Cluster through a cluster client (cluster.ts). Either way a Redis error is a reply in
 * its place, and storage that cannot answer is a RedisUnavailableError (503).
 */
export interface Backend {
  /** Runs one request's commands (one, or a pipeline's) and returns their replies in order. */
  run(commands: readonly Command[]): Promise<Reply[]>;
  /** Runs the commands as one MULTI … EXEC. */
  transaction(commands: readonly Command[]): Promise<TransactionReply>;
  /** Requests run and the commands in them (a transaction's MULTI and EXEC included), for benchmarks. */
  readonly sent: { batches: number; commands: number };
  /** While set, each request's commands are told to it as they are sent. */
  watcher: Watcher | undefined;
  /** Closes the connections and refuses new work. */
  close(): Promise<void>;
}
