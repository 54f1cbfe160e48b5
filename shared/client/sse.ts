/**
 * A Server-Sent Events parser, as the HTML standard's "event stream interpretation" has it: lines
 * end in CRLF, LF or CR; `field: value` lines build an event that a blank line dispatches; lines
 * starting with `:` are comments (keep-alives); `data` lines join with LF. Fed text as it arrives,
 * in chunks cut anywhere, it returns the events completed so far.
 */

/** One dispatched event. `id` is the stream's last event id so far (it carries over, as in EventSource). */
export interface SseMessage {
  /** `event:` field; `message` when none was given. */
  event: string;
  data: string;
  id: string | undefined;
}

/** Parses an event stream fed in arbitrary chunks (already decoded as UTF-8). */
export class SseParser {
  private buffer = "";
  /** The previous chunk ended in CR: an LF opening the next one belongs to that line end. */
  private pendingCr = false;
  private started = false;
  private event = "";
  private data: string[] = [];
  /** The `id:` seen in the event being read; it becomes the stream's last id when that event ends. */
  private idBuffer: string | undefined;
  private lastId: string | undefined;
  /** The reconnection time the server asked for (`retry:`), in milliseconds. */
  retryMs: number | undefined;

  /** Feeds `chunk`; returns the events it completed, in order. */
  push(chunk: string): SseMessage[] {
    let text = chunk;
    if (this.pendingCr && text.startsWith("\n")) text = text.slice(1);
    this.pendingCr = false;
    if (!this.started && text.length > 0) {
      // A byte order mark opening the stream is not part of the first line.
      if (text.startsWith("\uFEFF")) text = text.slice(1);
      this.started = true;
    }
    this.buffer += text;
    const messages: SseMessage[] = [];
    for (;;) {
      const end = this.buffer.search(/[\r\n]/);
      if (end < 0) break;
      const line = this.buffer.slice(0, end);
      let next = end + 1;
      if (this.buffer[end] === "\r") {
        if (end + 1 === this.buffer.length) this.pendingCr = true;
        else if (this.buffer[end + 1] === "\n") next = end + 2;
      }
      this.buffer = this.buffer.slice(next);
      const message = this.line(line);
      if (message) messages.push(message);
    }
    return messages;
  }

  /** The stream's last event id (from the `id:` fields of the events ended so far). */
  get lastEventId(): string | undefined {
    return this.lastId;
  }

  private line(line: string): SseMessage | undefined {
    if (line === "") return this.dispatch();
    if (line.startsWith(":")) return undefined;
    const colon = line.indexOf(":");
    const field = colon < 0 ? line : line.slice(0, colon);
    let value = colon < 0 ? "" : line.slice(colon + 1);
    if (value.startsWith(" ")) value = value.slice(1);
    switch (field) {
      case "event":
        this.event = value;
        break;
      case "data":
        this.data.push(value);
        break;
      case "id":
        if (!value.includes("\0")) this.idBuffer = value;
        break;
      case "retry":
        if (/^\d+$/.test(value)) this.retryMs = Number(value);
        break;
      default:
      // Unknown fields are ignored, as the standard says.
    }
    return undefined;
  }

  /** A blank line: the event built so far, unless it has no data (then it is dropped). */
  private dispatch(): SseMessage | undefined {
    // As the standard has it: the id counts once its event ended, even an event without data
    // (a cursor); the id of an event cut off by a dropped connection never counts.
    this.lastId = this.idBuffer;
    const data = this.data;
    const event = this.event;
    this.data = [];
    this.event = "";
    if (data.length === 0) return undefined;
    return { event: event || "message", data: data.join("\n"), id: this.lastId };
  }
}
