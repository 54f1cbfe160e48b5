import http from "node:http";
import type { AddressInfo } from "node:net";
import { setFlagsFromString } from "node:v8";
import { runInNewContext } from "node:vm";
import { afterEach, describe, expect, it } from "vitest";
import { actorKeyId, generateKeyPair, importPublicKey, verifyRequest } from "../../shared/auth/index.js";
import {
  ApiError,
  CoordinatorClient,
  SseParser,
  signerFromJwk,
  StreamLostError,
  StreamProtocolError,
  type StreamOptions,
} from "../../shared/client/index.js";
import type { FlowStreamEvent } from "../../shared/model/index.js";

/**
 * The client's event streams (shared/client/sse.ts, events.ts): the SSE parser on its own, then
 * CoordinatorClient.flowEvents against a real HTTP server started here, which checks every
 * connection's signature and plays a script per connection: events, a connection cut mid-event,
 * a 503, a 403, silence. The coordinator's own stream is tested in test/e2e/cli-watch.test.ts.
 */

describe("SseParser", () => {
  const all = (chunks: string[]) => {
    const parser = new SseParser();
    return chunks.flatMap((c) => parser.push(c));
  };

  it("reads id, event and data, joins data lines, ignores comments, and drops an event without data", () => {
    const text = ': keep-alive\n\nid: 1\nevent: job.started\ndata: {"a":\ndata:1}\n\nevent: nothing\n\nid: 2\ndata\n\n';
    expect(all([text])).toEqual([
      { event: "job.started", data: '{"a":\n1}', id: "1" },
      { event: "message", data: "", id: "2" },
    ]);
  });

  it("takes LF, CRLF and CR as line ends, a CRLF cut between chunks included, and any chunking alike", () => {
    const text = "\uFEFFid: 7\r\nevent: a\r\ndata:  two spaces\r\n\r\nid: 8\rdata: x\r\rdata: y\n\n";
    const expected = [
      { event: "a", data: " two spaces", id: "7" },
      { event: "message", data: "x", id: "8" },
      { event: "message", data: "y", id: "8" },
    ];
    expect(all([text])).toEqual(expected);
    expect(all([...text])).toEqual(expected); // one character at a time
    expect(all(["id: 7\r", "\nevent: a\r", "\ndata:  two spaces\r\n\r", "\nid: 8\rdata: x\r\rdata: y\n\n"])).toEqual(
      expected,
    );
  });

  it("keeps the last id across events, reads retry, ignores unknown fields, and never dispatches a cut-off event", () => {
    const parser = new SseParser();
    expect(parser.push("retry: 1500\nfoo: bar\nid: 3\ndata: a\n\ndata: b\n\nretry: soon\nid: 4\ndata: cut")).toEqual([
      { event: "message", data: "a", id: "3" },
      { event: "message", data: "b", id: "3" },
    ]);
    expect(parser.retryMs).toBe(1500);
    expect(parser.lastEventId).toBe("3"); // the cut-off event's id does not count
    expect(parser.push("\n\nid: 5\n\n")).toEqual([{ event: "message", data: "cut", id: "4" }]);
    expect(parser.lastEventId).toBe("5"); // an id without data still counts once its block ends
  });
});

/** What the test server saw of one connection. */
interface Seen {
  lastEventId: string | undefined;
  accept: string | undefined;
  nonce: string;
}

/** How the server answers the n-th connection (0-based); `since` is its Last-Event-ID. */
type Script = (n: number, since: number, res: http.ServerResponse) => void;

const servers: http.Server[] = [];
afterEach(async () => {
  for (const server of servers.splice(0)) {
    server.closeAllConnections();
    await new Promise((resolve) => server.close(resolve));
  }
});

function event(seq: number, type: FlowStreamEvent["type"] = "job.started"): FlowStreamEvent {
  return {
    seq,
    type,
    at_ms: 1_700_000_000_000 + seq,
    context_id: 1,
    flow_id: 2,
    trace_id: "trace",
    status: "started",
    job_id: 3,
    attempt: 1,
  };
}

const frame = (e: FlowStreamEvent) => `id: ${e.seq}\nevent: ${e.type}\ndata: ${JSON.stringify(e)}\n\n`;

function openStream(res: http.ServerResponse): void {
  res.writeHead(200, { "content-type": "text/event-stream", "cache-control": "no-store" });
  res.write(": keep-alive\n\n");
}

/**
 * A server for flow 2 of context 1 that verifies each connection's signature (as actor 1),
 * records it, and answers it by `script`. Resolves with a client signing as that actor.
 */
async function serve(script: Script): Promise<{ client: CoordinatorClient; seen: Seen[] }> {
  const jwk = await generateKeyPair();
  const seen: Seen[] = [];
  const server = http.createServer((req, res) => {
    const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}${req.url ?? "/"}`;
    const headers = new Headers(Object.entries(req.headers).map(([k, v]): [string, string] => [k, String(v)]));
    verifyRequest(new Request(url, { method: req.method ?? "GET", headers }), {
      body: new Uint8Array(),
      now: Math.floor(Date.now() / 1000),
      skewSeconds: 60,
      resolveKey: async (keyid) => (keyid === actorKeyId(1) ? importPublicKey(jwk.x) : null),
    }).then(
      (verified) => {
        expect(req.url).toBe("/v1/contexts/1/flows/2/events");
        const lastEventId = req.headers["last-event-id"] as string | undefined;
        seen.push({ lastEventId, accept: req.headers.accept, nonce: verified.nonce });
        script(seen.length - 1, Number(lastEventId ?? 0), res);
      },
      (error: Error) => res.writeHead(401, { "content-type": "text/plain" }).end(error.message),
    );
  });
  servers.push(server);
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const baseUrl = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  const client = new CoordinatorClient({ baseUrl, signer: await signerFromJwk(jwk, actorKeyId(1)) });
  return { client, seen };
}

/** Quick reconnects, so a test does not wait out the real backoff. */
const fast = { initialMs: 10, maxMs: 50, idleMs: 10_000, outageMs: 10_000 };

/** Reads `count` events of flow 2, then stops. */
async function take(client: CoordinatorClient, count: number, options: StreamOptions = {}): Promise<number[]> {
  const seqs: number[] = [];
  for await (const e of client.flowEvents(1, 2, { reconnect: fast, ...options })) {
    seqs.push(e.seq);
    if (seqs.length === count) break;
  }
  return seqs;
}

describe("CoordinatorClient.flowEvents", () => {
  it("resumes a cut connection with Last-Event-ID, signed anew, and never yields an event twice", async () => {
    const { client, seen } = await serve((n, since, res) => {
      openStream(res);
      if (n === 0) {
        res.write([1, 2, 3].map((s) => frame(event(s))).join(""));
        // Cut in the middle of event 4: the client must not take half an event.
        res.write(frame(event(4)).slice(0, 30));
        setTimeout(() => res.socket?.destroy(), 20);
        return;
      }
      // A server replaying from a little too early: the client drops what it saw already.
      res.write([since - 1, since, since + 1, since + 2, since + 3].map((s) => frame(event(s))).join(""));
    });
    const drops: [string, number | undefined][] = [];
    const resumed: (number | undefined)[] = [];
    const seqs = await take(client, 6, {
      onDrop: (reason, since) => drops.push([reason, since]),
      onResume: (since) => resumed.push(since),
    });
    expect(seqs).toEqual([1, 2, 3, 4, 5, 6]);
    expect(seen.map((s) => s.lastEventId)).toEqual([undefined, "3"]);
    expect(seen.every((s) => s.accept === "text/event-stream")).toBe(true);
    expect(new Set(seen.map((s) => s.nonce)).size).toBe(2);
    expect(drops).toEqual([["the connection was cut", 3]]);
    expect(resumed).toEqual([3]);
  });

  it("resumes a stream that started from now at the cursor it named, even before its first event", async () => {
    const { client, seen } = await serve((n, since, res) => {
      openStream(res);
      if (n === 0) {
        // Where "now" is (an id without data), then the connection drops before any event.
        res.write("id: 41\n\n");
        setTimeout(() => res.socket?.destroy(), 20);
        return;
      }
      res.write(frame(event(since + 1)));
    });
    const opened: number[] = [];
    expect(await take(client, 1, { onOpen: () => opened.push(seen.length) })).toEqual([42]);
    expect(seen.map((s) => s.lastEventId)).toEqual([undefined, "41"]);
    expect(opened).toEqual([1, 2]);
  });

  it("starts after `since`, and rides out a 503 and a silent connection", async () => {
    const { client, seen } = await serve((n, since, res) => {
      if (n === 0) {
        res.writeHead(503, { "content-type": "application/problem+json" });
        res.end(JSON.stringify({ type: "about:blank", title: "Service Unavailable", status: 503 }));
        return;
      }
      openStream(res);
      if (n === 1) return res.write(frame(event(since + 1))); // then nothing: no keep-alive either
      res.write(frame(event(since + 1)));
    });
    const drops: string[] = [];
    const seqs = await take(client, 2, {
      since: 10,
      reconnect: { ...fast, idleMs: 300 },
      onDrop: (reason) => drops.push(reason),
    });
    expect(seqs).toEqual([11, 12]);
    expect(seen.map((s) => s.lastEventId)).toEqual(["10", "10", "11"]);
    expect(drops).toEqual([
      expect.stringMatching(/^503 Service Unavailable/),
      expect.stringMatching(/nothing received/),
    ]);
  });

  it("throws a 4xx at once as ApiError, and what is not an event stream as StreamProtocolError", async () => {
    const forbidden = await serve((_n, _since, res) => {
      res.writeHead(403, { "content-type": "application/problem+json" });
      res.end(
        JSON.stringify({ type: "https://errors/forbidden", title: "Forbidden", status: 403, needed: ["readers"] }),
      );
    });
    const refused = await take(forbidden.client, 1).catch((error: unknown) => error);
    expect(refused).toBeInstanceOf(ApiError);
    expect((refused as ApiError).status).toBe(403);
    expect(forbidden.seen).toHaveLength(1);

    const json = await serve((_n, _since, res) => res.writeHead(200, { "content-type": "application/json" }).end("{}"));
    await expect(take(json.client, 1)).rejects.toThrow(StreamProtocolError);
    expect(json.seen).toHaveLength(1);

    const invalid = await serve((_n, _since, res) => {
      openStream(res);
      res.write(`id: 1\ndata: ${JSON.stringify({ ...event(1), status: "sleeping" })}\n\n`);
    });
    await expect(take(invalid.client, 1)).rejects.toThrow(/status/);
  });

  it("gives up after the outage window with StreamLostError naming the stream and the last failure", async () => {
    const { client, seen } = await serve((_n, _since, res) => {
      res.writeHead(502, { "content-type": "text/plain" }).end("bad gateway");
    });
    const lost = await take(client, 1, { reconnect: { ...fast, outageMs: 200 } }).catch((error: unknown) => error);
    expect(lost).toBeInstanceOf(StreamLostError);
    expect((lost as Error).message).toMatch(/^the event stream of flow 2: no connection for 0 s \(502 .*\); gave up$/);
    expect(seen.length).toBeGreaterThan(1);
  });

  it("ends quietly when its signal aborts, closing the connection", async () => {
    let closed: () => void = () => {};
    const gone = new Promise<void>((resolve) => (closed = resolve));
    const { client } = await serve((_n, _since, res) => {
      openStream(res);
      res.write(frame(event(1)));
      res.on("close", () => closed());
    });
    const controller = new AbortController();
    const seqs: number[] = [];
    for await (const e of client.flowEvents(1, 2, { signal: controller.signal, reconnect: fast })) {
      seqs.push(e.seq);
      controller.abort();
    }
    expect(seqs).toEqual([1]);
    await gone;
  });

  it("ends when its signal aborts after a garbage collection, closing the connection (Node's fetch let go of the abort)", async () => {
    // Node's fetch follows a Request's signal through weak references: once the Request was
    // collected, aborting reached no socket, and `flowc context watch` did not end on Ctrl-C.
    let closed: () => void = () => {};
    const gone = new Promise<void>((resolve) => (closed = resolve));
    const { client } = await serve((_n, _since, res) => {
      openStream(res);
      res.write(frame(event(1)));
      res.on("close", () => closed());
    });
    const controller = new AbortController();
    const events = client.flowEvents(1, 2, { signal: controller.signal, reconnect: fast });
    expect((await events.next()).value?.seq).toBe(1);
    const next = events.next(); // waits on the connection
    await collectGarbage();
    controller.abort();
    expect(await within(2_000, next)).toEqual({ done: true, value: undefined });
    await within(2_000, gone);
  });

  it("drops a silent connection after a garbage collection too, and resumes on a new one", async () => {
    const { client, seen } = await serve((n, since, res) => {
      openStream(res);
      res.write(frame(event(since + 1)));
      if (n === 0) setTimeout(() => void collectGarbage(), 50); // then silence
    });
    const seqs = await within(5_000, take(client, 2, { reconnect: { ...fast, idleMs: 400 } }));
    expect(seqs).toEqual([1, 2]);
    expect(seen.map((s) => s.lastEventId)).toEqual([undefined, "1"]);
  });
});

/** Runs a full garbage collection (twice, a tick apart: what a weak reference held goes in the second). */
async function collectGarbage(): Promise<void> {
  setFlagsFromString("--expose-gc");
  const gc = runInNewContext("gc") as () => void;
  gc();
  await new Promise((resolve) => setTimeout(resolve, 10));
  gc();
}

/** `promise`, or a failure naming the wait once `ms` passed. */
function within<T>(ms: number, promise: Promise<T>): Promise<T> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  const late = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`still waiting after ${ms} ms`)), ms);
  });
  return Promise.race([promise, late]).finally(() => clearTimeout(timer));
}
