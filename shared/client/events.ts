import { ApiError, readAnswer } from "./errors.js";
import { SseParser } from "./sse.js";

/** How a stream rides out a dropped connection: backoff between tries, and when it gives up. */
export interface ReconnectPolicy {
  /** Wait before the first reconnect of an outage (a server's `retry:` field replaces it). */
  initialMs: number;
  /** The backoff doubles up to this. */
  maxMs: number;
  /** Nothing received for this long (the server sends a keep-alive every 15 s): the connection is dead. */
  idleMs: number;
  /** An outage longer than this ends the stream with a StreamLostError. */
  outageMs: number;
}

/** Rides out a restart or a deploy of the coordinator; matches what `flowc flow watch` tolerated when it polled. */
export const DEFAULT_RECONNECT: ReconnectPolicy = { initialMs: 250, maxMs: 5_000, idleMs: 45_000, outageMs: 30_000 };

/** What a subscription to an event stream takes. */
export interface StreamOptions {
  /** Only events after this sequence number (sent as `Last-Event-ID`); all the server replays when absent. */
  since?: number;
  /** Aborting ends the iteration quietly (and closes the connection). */
  signal?: AbortSignal;
  /** The connection dropped and is being reconnected; `since` is the last sequence number seen. Once per outage. */
  onDrop?: (reason: string, since: number | undefined) => void;
  /** A connection after a drop is open again, resuming after `since`. */
  onResume?: (since: number | undefined) => void;
  /**
   * A connection is open (the first one, and each after a drop). A watcher of a stream that
   * starts "from now" reads its list again here, so nothing that happened before is missed.
   */
  onOpen?: () => void;
  reconnect?: Partial<ReconnectPolicy>;
}

/** The stream could not be reconnected within the outage window; `cause` is the last failure. */
export class StreamLostError extends Error {
  override name = "StreamLostError";
}

/** The server answered something that is not an event stream of this API: reconnecting would not help. */
export class StreamProtocolError extends Error {
  override name = "StreamProtocolError";
}

/** Where a stream comes from: opens one connection (a signed GET, `Last-Event-ID: since` when given). */
export interface StreamSource {
  open(since: number | undefined, signal: AbortSignal): Promise<Response>;
  /** What the stream is, for messages: `the event stream of flow 3 in context 1`. */
  label: string;
}

/** A failure worth another connection: the network, a 5xx, a connection that ended or went quiet. */
function transient(error: unknown): boolean {
  if (error instanceof StreamProtocolError) return false;
  if (error instanceof ApiError) return error.status >= 500;
  return !(error instanceof Error && error.name === "ZodError");
}

function reasonOf(error: unknown): string {
  // undici's word for a body whose connection went away mid-read.
  if (error instanceof TypeError && error.message === "terminated") return "the connection was cut";
  return error instanceof Error ? error.message : String(error);
}

/** Waits `ms`, or less when `signal` aborts (at once when it already has). */
export function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    if (signal?.aborted) return resolve();
    const done = () => {
      clearTimeout(timer);
      signal?.removeEventListener("abort", done);
      resolve();
    };
    const timer = setTimeout(done, ms);
    signal?.addEventListener("abort", done, { once: true });
  });
}

/**
 * Follows an event stream: yields each event (its `data` parsed as JSON and by `schema`) once,
 * in sequence order. A dropped connection, a 5xx or a silent one is reconnected with backoff,
 * resuming after the last sequence number seen; an event at or below it is never yielded again.
 * A 4xx is thrown as ApiError at once; an outage past `outageMs` ends with a StreamLostError.
 */
export async function* followStream<T extends { seq: number }>(
  source: StreamSource,
  /** What checks each event: a zod schema, or anything with its `parse` (the console's plain checks). */
  schema: { parse(value: unknown): T },
  options: StreamOptions = {},
): AsyncGenerator<T, void, undefined> {
  const policy = { ...DEFAULT_RECONNECT, ...options.reconnect };
  const { signal } = options;
  let since = options.since;
  let delay = policy.initialMs;
  /** When the current outage began (undefined while the stream flows). */
  let outage: number | undefined;
  let dropped = false;
  for (;;) {
    if (signal?.aborted) return;
    const connection = new AbortController();
    const abort = () => connection.abort(signal?.reason);
    signal?.addEventListener("abort", abort, { once: true });
    let idle: ReturnType<typeof setTimeout> | undefined;
    let failure: unknown;
    try {
      const response = await source.open(since, connection.signal);
      if (!response.ok) await readAnswer(response); // throws ApiError
      const type = response.headers.get("content-type") ?? "";
      if (!type.startsWith("text/event-stream") || !response.body) {
        await response.body?.cancel();
        throw new StreamProtocolError(
          `${source.label}: the answer is not an event stream (content-type ${type || "none"})`,
        );
      }
      if (dropped) options.onResume?.(since);
      dropped = false;
      options.onOpen?.();
      const reader = response.body.getReader();
      const decoder = new TextDecoder();
      const parser = new SseParser();
      for (;;) {
        // Timed only while waiting on the server, not while the caller handles an event.
        idle = setTimeout(
          () => connection.abort(new Error(`nothing received for ${policy.idleMs / 1000} s`)),
          policy.idleMs,
        );
        const { done, value } = await reader.read();
        clearTimeout(idle);
        if (done) throw new Error("the connection closed");
        outage = undefined;
        delay = parser.retryMs ?? policy.initialMs;
        for (const message of parser.push(decoder.decode(value, { stream: true }))) {
          let data: unknown;
          try {
            data = JSON.parse(message.data);
          } catch {
            throw new StreamProtocolError(`${source.label}: event ${message.id ?? "?"} is not JSON`);
          }
          const event = schema.parse(data);
          if (since !== undefined && event.seq <= since) continue;
          since = event.seq;
          yield event;
        }
        // A stream that starts "from now" names where now is (an `id:` without data): a
        // reconnect before the first event resumes from there, not from a later now.
        const cursor = parser.lastEventId;
        if (cursor !== undefined && /^\d{1,15}$/.test(cursor) && Number(cursor) > (since ?? -1)) since = Number(cursor);
      }
    } catch (error) {
      if (signal?.aborted) return;
      // An abort of our own (a silent connection) rejects with the reason it was given.
      failure = connection.signal.aborted ? connection.signal.reason : error;
      if (!transient(failure)) throw failure;
    } finally {
      if (idle !== undefined) clearTimeout(idle);
      signal?.removeEventListener("abort", abort);
      connection.abort();
    }
    outage ??= Date.now();
    if (Date.now() - outage > policy.outageMs) {
      throw new StreamLostError(
        `${source.label}: no connection for ${Math.round(policy.outageMs / 1000)} s (${reasonOf(failure)}); gave up`,
        { cause: failure },
      );
    }
    if (!dropped) options.onDrop?.(reasonOf(failure), since);
    dropped = true;
    await sleep(delay, signal);
    delay = Math.min(delay * 2, policy.maxMs);
  }
}
