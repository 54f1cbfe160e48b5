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
  const cursor: Cursor = { since: options.since };
  let delay = policy.initialMs;
  /** When the current outage began (undefined while the stream flows). */
  let outage: number | undefined;
  let dropped = false;
  for (;;) {
    if (signal?.aborted) return;
    const connection = new AbortController();
    const abort = () => connection.abort(signal?.reason);
    signal?.addEventListener("abort", abort, { once: true });
    let failure: unknown;
    try {
      const body = await openStream(source, cursor.since, connection.signal);
      if (dropped) options.onResume?.(cursor.since);
      dropped = false;
      options.onOpen?.();
      const flowing = (retryMs: number | undefined) => {
        outage = undefined;
        delay = retryMs ?? policy.initialMs;
      };
      yield* readEvents(body, { source, schema, cursor, connection, idleMs: policy.idleMs, flowing });
    } catch (error) {
      if (signal?.aborted) return;
      // An abort of our own (a silent connection) rejects with the reason it was given.
      failure = connection.signal.aborted ? connection.signal.reason : error;
      if (!transient(failure)) throw failure;
    } finally {
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
    if (!dropped) options.onDrop?.(reasonOf(failure), cursor.since);
    dropped = true;
    await sleep(delay, signal);
    delay = Math.min(delay * 2, policy.maxMs);
  }
}

/** The last sequence number seen: where a reconnection resumes. */
interface Cursor {
  since: number | undefined;
}

/** Opens the stream after `since`: its body, or ApiError (a 4xx, 5xx) or StreamProtocolError. */
async function openStream(
  source: StreamSource,
  since: number | undefined,
  signal: AbortSignal,
): Promise<ReadableStream<Uint8Array>> {
  const response = await untilAborted(source.open(since, signal), signal);
  if (!response.ok) await readAnswer(response); // throws ApiError
  const type = response.headers.get("content-type") ?? "";
  if (!type.startsWith("text/event-stream") || !response.body) {
    await response.body?.cancel();
    throw new StreamProtocolError(
      `${source.label}: the answer is not an event stream (content-type ${type || "none"})`,
    );
  }
  return response.body;
}

/**
 * `opening`, or its abort's reason as soon as `signal` aborts, whether or not the abort reaches
 * the request (see readEvents: Node's fetch may have let go of it); an answer that comes after
 * all has its body cancelled.
 */
function untilAborted(opening: Promise<Response>, signal: AbortSignal): Promise<Response> {
  return new Promise((resolve, reject) => {
    const abort = () => reject(signal.reason);
    if (signal.aborted) abort();
    signal.addEventListener("abort", abort, { once: true });
    opening.then(
      (response) => {
        signal.removeEventListener("abort", abort);
        if (signal.aborted) void response.body?.cancel().catch(() => undefined);
        resolve(response);
      },
      (error: unknown) => {
        signal.removeEventListener("abort", abort);
        reject(error);
      },
    );
  });
}

/**
 * The events of one connection, in order, each once (past the cursor, which it moves): until the
 * connection closes or stays silent for `idleMs` (it is aborted then), which throws.
 */
async function* readEvents<T extends { seq: number }>(
  body: ReadableStream<Uint8Array>,
  c: {
    source: StreamSource;
    schema: { parse(value: unknown): T };
    cursor: Cursor;
    connection: AbortController;
    idleMs: number;
    /** Data came: the outage is over, and the server's `retry` (if any) is the next backoff. */
    flowing: (retryMs: number | undefined) => void;
  },
): AsyncGenerator<T, void, undefined> {
  const reader = body.getReader();
  const decoder = new TextDecoder();
  const parser = new SseParser();
  let idle: ReturnType<typeof setTimeout> | undefined;
  // Aborting the connection cancels the body here, as well as through the request's signal:
  // Node's fetch follows a Request's signal through weak references, so once the Request was
  // garbage collected an abort (Ctrl-C, a silent connection) reached no socket and a pending
  // read waited for ever (`flowc context watch` did not end on Ctrl-C).
  const cancel = () => void reader.cancel(c.connection.signal.reason).catch(() => undefined);
  if (c.connection.signal.aborted) cancel();
  c.connection.signal.addEventListener("abort", cancel, { once: true });
  try {
    for (;;) {
      // Timed only while waiting on the server, not while the caller handles an event.
      idle = setTimeout(() => c.connection.abort(new Error(`nothing received for ${c.idleMs / 1000} s`)), c.idleMs);
      const { done, value } = await reader.read();
      clearTimeout(idle);
      if (done) throw new Error("the connection closed");
      c.flowing(parser.retryMs);
      for (const message of parser.push(decoder.decode(value, { stream: true }))) {
        const event = c.schema.parse(eventData(c.source, message));
        if (c.cursor.since !== undefined && event.seq <= c.cursor.since) continue;
        c.cursor.since = event.seq;
        yield event;
      }
      // A stream that starts "from now" names where now is (an `id:` without data): a reconnect
      // before the first event resumes from there, not from a later now.
      const id = parser.lastEventId;
      if (id !== undefined && /^\d{1,15}$/.test(id) && Number(id) > (c.cursor.since ?? -1)) c.cursor.since = Number(id);
    }
  } finally {
    if (idle !== undefined) clearTimeout(idle);
    c.connection.signal.removeEventListener("abort", cancel);
    // A caller that stopped reading (it returned mid-stream) lets go of the connection itself.
    void reader.cancel().catch(() => undefined);
  }
}

/** An event's data as JSON, or a StreamProtocolError naming it. */
function eventData(source: StreamSource, message: { id?: string | undefined; data: string }): unknown {
  try {
    return JSON.parse(message.data);
  } catch {
    throw new StreamProtocolError(`${source.label}: event ${message.id ?? "?"} is not JSON`);
  }
}
