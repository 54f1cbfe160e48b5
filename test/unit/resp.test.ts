import { describe, expect, it } from "vitest";
import { encodeCommand, ErrorReply, ProtocolError, ReplyParser, StatusReply } from "../../infra/redis-rest/resp.js";

describe("RESP2", () => {
  it("encodes a command as an array of bulk strings, counting bytes not characters", () => {
    expect(encodeCommand(["SET", "k", "é"]).toString()).toBe("*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$2\r\né\r\n");
  });

  it("parses every reply type, nested, including nil and errors inside arrays", () => {
    const parser = new ReplyParser();
    const wire = "+OK\r\n-ERR bad\r\n:42\r\n$-1\r\n$5\r\nhello\r\n*3\r\n$1\r\na\r\n*2\r\n:1\r\n-ERR inner\r\n*-1\r\n";
    const replies = parser.push(Buffer.from(wire));
    expect(replies).toHaveLength(6);
    expect(replies[0]).toEqual(new StatusReply("OK"));
    expect(replies[1]).toEqual(new ErrorReply("ERR bad"));
    expect(replies[2]).toBe(42);
    expect(replies[3]).toBeNull();
    expect((replies[4] as Buffer).toString()).toBe("hello");
    const nested = replies[5] as unknown[];
    expect((nested[0] as Buffer).toString()).toBe("a");
    expect(nested[1]).toEqual([1, new ErrorReply("ERR inner")]);
    expect(nested[2]).toBeNull();
  });

  it("waits for the rest of a reply split anywhere, byte by byte", () => {
    const wire = Buffer.from("*2\r\n$12\r\nhello\r\nworld\r\n:7\r\n+PONG\r\n");
    const parser = new ReplyParser();
    const replies = [];
    for (const byte of wire) replies.push(...parser.push(Buffer.from([byte])));
    expect(replies).toHaveLength(2);
    expect((replies[0] as Buffer[])[0]?.toString()).toBe("hello\r\nworld");
    expect(replies[1]).toEqual(new StatusReply("PONG"));
  });

  it("refuses bytes that are not RESP", () => {
    expect(() => new ReplyParser().push(Buffer.from("?what\r\n"))).toThrow(ProtocolError);
  });
});
