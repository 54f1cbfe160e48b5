/** How often an idle Server-Sent Events stream sends a comment, so proxies keep it open. */
const KEEP_ALIVE_MS = 15_000;

/** Writes a slow client may have waiting before its stream is ended. */
const MAX_PENDING = 20_000;

/** How long an EventSource waits before it reconnects (the `retry` field), in milliseconds. */
const RETRY_MS = 2_000;

/**
 * Serves a Durable Object's event WebSocket as Server-Sent Events: each frame (one JSON event
 * with `seq` and `type`) becomes `id: <seq>`, `event: <type>`, `data: <json>`, so a client that
 * reconnects sends `Last-Event-ID` and resumes after it. The socket stays on the object (which
 * may hibernate); this Worker only relays while the client listens. When the client goes away
 * the socket is closed; when the object closes it (a deploy, a reset), the stream ends and the
 * client reconnects.
 */
export function eventStream(socket: WebSocket): Response {
  const { readable, writable } = new TransformStream<Uint8Array, Uint8Array>();
  const writer = writable.getWriter();
  const encoder = new TextEncoder();
  let open = true;
  const end = () => {
    if (!open) return;
    open = false;
    clearInterval(timer);
    try {
      socket.close(1000, "the subscriber went away");
    } catch {
      // Already closed.
    }
    writer.close().catch(() => undefined);
  };
  // Writes are chained, so events leave in order; a failed write means the client is gone. A
  // client that stops reading without going away is let go past MAX_PENDING unsent writes (it
  // resumes with Last-Event-ID), rather than held in memory without end.
  let last: Promise<void> = Promise.resolve();
  let pending = 0;
  const send = (text: string) => {
    if (!open) return;
    if (++pending > MAX_PENDING) return end();
    last = last
      .then(() => writer.write(encoder.encode(text)))
      .then(() => void pending--)
      .catch(end);
  };
  socket.accept();
  socket.addEventListener("message", (message) => {
    const data = typeof message.data === "string" ? message.data : new TextDecoder().decode(message.data);
    const frame = JSON.parse(data) as { seq: number; type: string } | { cursor: number };
    // Where a stream "from now" starts: an id without data sets the client's Last-Event-ID.
    if ("cursor" in frame) send(`id: ${frame.cursor}\n\n`);
    else send(`id: ${frame.seq}\nevent: ${frame.type}\ndata: ${data}\n\n`);
  });
  socket.addEventListener("close", () => void last.then(end));
  socket.addEventListener("error", () => void last.then(end));
  const timer = setInterval(() => send(": keep-alive\n\n"), KEEP_ALIVE_MS);
  send(`retry: ${RETRY_MS}\n\n`);
  return new Response(readable, {
    headers: {
      "content-type": "text/event-stream; charset=utf-8",
      "cache-control": "no-cache, no-transform",
      "x-accel-buffering": "no",
    },
  });
}
