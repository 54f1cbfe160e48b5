import http from "node:http";
import { signRequest, type RequestSigner } from "../../shared/auth/index.js";

/** One Server-Sent Event as read off the wire. */
export interface SseEvent {
  id?: string;
  event?: string;
  data: string;
}

/** What a raw stream read saw: its status, its events, and the body of a refusal. */
export interface SseRead {
  status: number;
  contentType: string | null;
  events: SseEvent[];
  problem?: ProblemBody;
}

type ProblemBody = { type?: string; detail?: string };

/**
 * Reads a signed SSE stream (`signer` undefined: unsigned) until `enough` says so or `timeoutMs`
 * passes (then it throws, naming what it saw), and closes it. Kept raw, apart from the client's
 * own reader, so the tests check the wire format itself.
 */
export async function readSse(
  url: string,
  signer: RequestSigner | undefined,
  enough: (events: SseEvent[]) => boolean,
  options: { headers?: Record<string, string>; timeoutMs?: number } = {},
): Promise<SseRead> {
  const abort = new AbortController();
  const timer = setTimeout(() => abort.abort(), options.timeoutMs ?? 60_000);
  let request = new Request(url, { headers: { accept: "text/event-stream", ...options.headers } });
  if (signer) request = await signRequest(request, signer);
  const events: SseEvent[] = [];
  try {
    const response = await fetch(request, { signal: abort.signal });
    const contentType = response.headers.get("content-type");
    if (response.status !== 200)
      return { status: response.status, contentType, events, problem: (await response.json()) as ProblemBody };
    const reader = (response.body as ReadableStream<Uint8Array>).getReader();
    const decoder = new TextDecoder();
    let buffer = "";
    while (!enough(events)) {
      const { value, done } = await reader.read();
      if (done) break;
      buffer += decoder.decode(value, { stream: true });
      let end: number;
      while ((end = buffer.indexOf("\n\n")) >= 0) {
        const block = buffer.slice(0, end);
        buffer = buffer.slice(end + 2);
        const event: SseEvent = { data: "" };
        const data: string[] = [];
        for (const line of block.split("\n")) {
          if (line.startsWith(":")) continue;
          const [field, ...rest] = line.split(":");
          const text = rest.join(":").replace(/^ /, "");
          if (field === "id") event.id = text;
          if (field === "event") event.event = text;
          if (field === "data") data.push(text);
        }
        if (data.length > 0) events.push({ ...event, data: data.join("\n") });
      }
    }
    abort.abort();
    return { status: 200, contentType, events };
  } catch (error) {
    if (abort.signal.aborted && !enough(events))
      throw new Error(`the stream ${url} did not say enough in time; it said ${events.length} events`, {
        cause: error,
      });
    if (abort.signal.aborted) return { status: 200, contentType: "text/event-stream", events };
    throw error;
  } finally {
    clearTimeout(timer);
  }
}

/** The JSON of each event's data. */
export function parsed<T>(events: SseEvent[]): T[] {
  return events.map((e) => JSON.parse(e.data) as T);
}

/**
 * A WebSocket (Node's own, as a browser's: it cannot sign its handshake) collecting its frames;
 * `opened` rejects with the handshake's failure.
 */
export function collectSocket(url: string): { frames: string[]; opened: Promise<void>; socket: WebSocket } {
  const socket = new WebSocket(url);
  const frames: string[] = [];
  socket.addEventListener("message", (m) => frames.push(String(m.data)));
  const opened = new Promise<void>((resolve, reject) => {
    socket.addEventListener("open", () => resolve());
    socket.addEventListener("error", () => reject(new Error(`the WebSocket ${url} did not open`)));
  });
  return { frames, opened, socket };
}

/**
 * A WebSocket handshake that is expected to be refused: its status and problem document (fetch
 * will not send `Upgrade`, so it is made with node:http).
 */
export function refusedUpgrade(url: string, method = "GET"): Promise<{ status: number; problem: { type?: string } }> {
  return new Promise((resolve, reject) => {
    const request = http.request(url, {
      method,
      headers: {
        connection: "Upgrade",
        upgrade: "websocket",
        "sec-websocket-version": "13",
        "sec-websocket-key": btoa("0123456789abcdef"),
      },
    });
    request.on("upgrade", (_res, socket) => {
      socket.destroy();
      reject(new Error(`${url} accepted the WebSocket`));
    });
    request.on("response", (res) => {
      let text = "";
      res.on("data", (chunk: Buffer) => (text += chunk.toString()));
      res.on("end", () =>
        resolve({ status: res.statusCode ?? 0, problem: JSON.parse(text || "{}") as { type?: string } }),
      );
    });
    request.on("error", reject);
    request.end();
  });
}
