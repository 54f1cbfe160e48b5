import { errors, Redis } from "@upstash/redis/cloudflare";
import { CrossSlotError, RedisCommandError, StorageUnavailableError } from "./errors.js";

export type { Redis };

/** How to reach the Upstash-protocol endpoint. */
export interface RedisConfig {
  url: string;
  token: string;
  /** Per-request deadline, so a storage outage answers quickly instead of hanging. */
  timeoutMs?: number;
  /** Retries of a request that failed in the network (the client's own backoff). */
  retries?: number;
}

/**
 * A client for Upstash (or the local REST endpoint). Automatic deserialization is off: every
 * value comes back as the string Redis holds and is parsed by its schema, never guessed at.
 * Replies come as plain JSON strings, not base64 (the client's default, for bytes that are not
 * UTF-8): everything this project writes reaches Redis as JSON text, so it is UTF-8 there, and
 * base64 cost every reply an encoding on the server and a decoding per string in the Worker.
 * Auto-pipelining stays on (the client's default): reads made at once, such as the messages of
 * the attempts one POST delivers (`OutgoingMessages.take`), go out as one request.
 */
export function connectRedis(config: RedisConfig): Redis {
  const timeoutMs = config.timeoutMs ?? 5_000;
  return new Redis({
    url: config.url,
    token: config.token,
    automaticDeserialization: false,
    enableTelemetry: false,
    readYourWrites: false,
    responseEncoding: false,
    retry: { retries: config.retries ?? 2, backoff: (attempt) => 50 * 2 ** attempt },
    signal: () => AbortSignal.timeout(timeoutMs),
  });
}

/**
 * Runs one storage call and names its failure: unreachable storage (network errors, timeouts,
 * a REST endpoint whose Redis is down, a gateway's non-JSON error page) becomes
 * StorageUnavailableError; a command Redis refused becomes RedisCommandError.
 */
export async function callRedis<T>(call: () => Promise<T>): Promise<T> {
  try {
    return await call();
  } catch (error) {
    throw describeRedisFailure(error);
  }
}

function describeRedisFailure(error: unknown): Error {
  if (error instanceof StorageUnavailableError || error instanceof RedisCommandError) return error;
  const message = stripCommand(error instanceof Error ? error.message : String(error));
  // Not the client's error as the cause: its message and stack carry the whole command, every
  // value included (a megabyte result logged on every failure), and loggers print causes.
  const cause = { cause: new Error(message) };
  if (error instanceof errors.UpstashJSONParseError || !(error instanceof errors.UpstashError)) {
    return new StorageUnavailableError(`storage is unreachable: ${message}`, cause);
  }
  if (/^ERR Redis is unavailable|^Unauthorized|LOADING|MASTERDOWN|TRYAGAIN|CLUSTERDOWN/.test(message)) {
    return new StorageUnavailableError(`storage is unavailable: ${message}`, cause);
  }
  // A Redis Cluster refusing keys of two slots: a Worker not told it is a cluster, or a layout bug.
  if (message.startsWith("CROSSSLOT")) return new CrossSlotError(`Redis refused a command: ${message}`, cause);
  return new RedisCommandError(`Redis refused a command: ${message}`, cause);
}

/** The most of a storage error's text kept for logs and answers. */
const MESSAGE_CHARS = 300;

/**
 * The client appends the whole command (with its values) to errors, and a body it could not
 * parse may be anything: keep the reason, cut to a short prefix, out of logs.
 */
function stripCommand(message: string): string {
  const at = message.indexOf(", command was:");
  const reason = at < 0 ? message : message.slice(0, at);
  return reason.length > MESSAGE_CHARS ? `${reason.slice(0, MESSAGE_CHARS)}… (${reason.length} characters)` : reason;
}
