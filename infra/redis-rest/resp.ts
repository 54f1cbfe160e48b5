/**
 * RESP2, the wire protocol of redis-server: an encoder for commands and a streaming parser for
 * replies. Written here rather than taken from a client library, and kept so when the HTTP side
 * moved to Hono, because:
 * - the REST endpoint must see replies exactly as Redis sent them: a status reply (`+OK`) and a
 *   bulk string are encoded differently on the Upstash wire, and an error is a value in its place
 *   (a pipeline entry, an EXEC slot, a Lua table item), never thrown, so it is reported where it
 *   occurred;
 * - no client's reconnect, offline queue or retry policy sits between a request and the socket: a
 *   broken connection fails its own batch (503) and is dropped (connection.ts, pool.ts), so the
 *   storage fault tests (redis-server stopped or frozen) see Redis's behaviour, not a client's;
 * - it is about a hundred lines, and test/unit/resp.test.ts covers every reply type, nesting and
 *   replies split at any byte.
 */

/** A simple-string reply (`+OK`, `+PONG`, `+string` from TYPE). */
export class StatusReply {
  constructor(readonly value: string) {}
}

/** An error reply (`-ERR ...`), top level or nested inside an array. */
export class ErrorReply {
  constructor(readonly message: string) {}
}

/** One reply: bulk strings stay bytes, integers become numbers, nil becomes null. */
export type Reply = Buffer | number | null | StatusReply | ErrorReply | Reply[];

const CRLF = Buffer.from("\r\n");

/** Encodes one command as a RESP array of bulk strings. */
export function encodeCommand(args: readonly (string | Buffer)[]): Buffer {
  const parts: Buffer[] = [Buffer.from(`*${args.length}\r\n`)];
  for (const arg of args) {
    const bytes = typeof arg === "string" ? Buffer.from(arg, "utf8") : arg;
    parts.push(Buffer.from(`$${bytes.length}\r\n`), bytes, CRLF);
  }
  return Buffer.concat(parts);
}

/** Thrown by the parser on bytes that are not RESP2; the connection must be dropped. */
export class ProtocolError extends Error {
  override name = "ProtocolError";
}

/** Signals that the buffer ends before the current reply does. */
const INCOMPLETE = Symbol("incomplete");
type Parsed = { reply: Reply; next: number } | typeof INCOMPLETE;

/**
 * Accumulates socket chunks and yields complete replies in order. Partial replies stay buffered
 * until the rest arrives; nothing is parsed twice past a completed reply.
 */
export class ReplyParser {
  private buffer: Buffer = Buffer.alloc(0);

  /** Adds a chunk and returns every reply it completed. */
  push(chunk: Buffer): Reply[] {
    this.buffer = this.buffer.length === 0 ? chunk : Buffer.concat([this.buffer, chunk]);
    const replies: Reply[] = [];
    let offset = 0;
    for (;;) {
      const parsed = parseReply(this.buffer, offset);
      if (parsed === INCOMPLETE) break;
      replies.push(parsed.reply);
      offset = parsed.next;
    }
    this.buffer = offset === 0 ? this.buffer : this.buffer.subarray(offset);
    return replies;
  }
}

function parseReply(buf: Buffer, start: number): Parsed {
  if (start >= buf.length) return INCOMPLETE;
  const lineEnd = buf.indexOf(CRLF, start);
  if (lineEnd < 0) return INCOMPLETE;
  const type = String.fromCharCode(buf[start] as number);
  const line = buf.toString("utf8", start + 1, lineEnd);
  const afterLine = lineEnd + 2;
  switch (type) {
    case "+":
      return { reply: new StatusReply(line), next: afterLine };
    case "-":
      return { reply: new ErrorReply(line), next: afterLine };
    case ":":
      return { reply: Number(line), next: afterLine };
    case "$": {
      const length = Number(line);
      if (length < 0) return { reply: null, next: afterLine };
      const end = afterLine + length;
      if (buf.length < end + 2) return INCOMPLETE;
      return { reply: Buffer.from(buf.subarray(afterLine, end)), next: end + 2 };
    }
    case "*": {
      const count = Number(line);
      if (count < 0) return { reply: null, next: afterLine };
      const items: Reply[] = [];
      let offset = afterLine;
      for (let i = 0; i < count; i++) {
        const item = parseReply(buf, offset);
        if (item === INCOMPLETE) return INCOMPLETE;
        items.push(item.reply);
        offset = item.next;
      }
      return { reply: items, next: offset };
    }
    default:
      throw new ProtocolError(`unexpected RESP type byte ${JSON.stringify(type)}`);
  }
}
