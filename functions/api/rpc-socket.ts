import type { Context } from "hono";
import { formatBytes, SIZE_LIMITS, utf8Bytes } from "../../shared/model/index.js";
import { keyCache } from "../core/key-cache.js";
import { closeQuietly } from "../core/sockets.js";
import type { FlowCall } from "../service/call.js";
import type { AppEnv } from "./app-env.js";
import { flowCall } from "./call.js";
import { answerMessage, type Transport } from "./rpc-dispatch.js";
import { lazyTable, rpcMethods } from "./rpc-methods.js";
import { frames, SOCKET_METHODS, Subscriptions, type Frame } from "./rpc-subscriptions.js";

/** How many frames of one session run at once; the next ones wait their turn, in order. */
const MAX_FRAMES_IN_FLIGHT = 16;
/** How many frames may wait: a client sending faster than its calls end is closed (1008) rather than buffered without end. */
export const MAX_FRAMES_WAITING = 256;

/** A session runs every method of POST /rpc, and the subscriptions. */
const SESSION: Transport = { methods: lazyTable(() => ({ ...rpcMethods(), ...SOCKET_METHODS })) };

/**
 * A JSON-RPC 2.0 session on a WebSocket, in this Worker: each text frame is a call or a batch,
 * run as the principal that opened the socket (every method checks its permissions as over
 * POST /rpc), answered in a frame of its own. Frames run concurrently up to
 * MAX_FRAMES_IN_FLIGHT, so answers may come in another order than the calls: match them by id.
 * Subscriptions push `flow.event` notifications; all of them close with the session. A key
 * removed or rotated anywhere (the revocation epoch moved) ends every session with 1008 before
 * its next frame runs, within a second: the client signs in again, with a key that still counts.
 */
class RpcSession {
  private readonly waiting: unknown[] = [];
  private running = 0;
  private ended = false;
  private readonly subscriptions = new Subscriptions((text) => this.send(text));

  constructor(
    private readonly socket: WebSocket,
    /** The call of the upgrade request: its principal, storage and bindings; each frame brings its body. */
    private readonly base: FlowCall,
    /** The revocation epoch the upgrade was authenticated under. */
    private readonly epoch: string,
  ) {}

  listen(): void {
    this.socket.addEventListener("message", (message) => {
      if (this.waiting.length >= MAX_FRAMES_WAITING) {
        this.end(1008, `more than ${MAX_FRAMES_WAITING} frames waiting: wait for answers before sending more`);
        return;
      }
      const size = typeof message.data === "string" ? utf8Bytes(message.data) : message.data.byteLength;
      if (size > SIZE_LIMITS.requestBody) {
        // 1009, "message too big": a frame is a request, and takes what a request's body may.
        this.end(1009, `a frame of ${formatBytes(size)}: at most ${formatBytes(SIZE_LIMITS.requestBody)}`);
        return;
      }
      this.waiting.push(message.data);
      this.pump();
    });
    this.socket.addEventListener("close", (event) => this.end(event.code, event.reason));
    this.socket.addEventListener("error", () => this.end(1011, "the connection failed"));
  }

  private pump(): void {
    while (!this.ended && this.running < MAX_FRAMES_IN_FLIGHT && this.waiting.length > 0) {
      const data = this.waiting.shift();
      this.running++;
      void this.run(data).finally(() => {
        this.running--;
        this.pump();
      });
    }
  }

  private async run(data: unknown): Promise<void> {
    if (!(await this.keysStand())) return;
    const body = typeof data === "string" ? new TextEncoder().encode(data) : new Uint8Array(data as ArrayBuffer);
    const text = typeof data === "string" ? data : new TextDecoder().decode(body);
    const call: FlowCall = { ...this.base, body: new Uint8Array(body) };
    const frame: Frame = { subscriptions: this.subscriptions, created: [] };
    frames.set(call, frame);
    const answer = await answerMessage(call, SESSION, text);
    if (answer) this.send(JSON.stringify(answer));
    // The answers naming the new subscriptions are out: their events may follow.
    for (const subscription of frame.created) subscription.release();
  }

  /** False (and the session ended) once a key was revoked or rotated since the session opened. */
  private async keysStand(): Promise<boolean> {
    const store = this.base.store;
    try {
      if ((await keyCache.epoch(store.keys.prefix, () => store.keyEpoch.read())) === this.epoch) return true;
      this.end(1008, "a key was removed or rotated since this session opened: connect and sign in again");
    } catch {
      this.end(1011, "storage is unreachable: connect again");
    }
    return false;
  }

  private send(text: string): void {
    if (this.ended) return;
    try {
      this.socket.send(text);
    } catch {
      this.end(1011, "the connection failed");
    }
  }

  private end(code: number, reason: string): void {
    if (this.ended) return;
    this.ended = true;
    this.waiting.length = 0;
    this.subscriptions.closeAll();
    closeQuietly(this.socket, code, reason);
  }
}

/**
 * Opens a session for an upgrade request that `authenticate` accepted: answers 101 with the
 * client's end of a WebSocket pair whose other end the session holds in this isolate.
 */
export async function openSession(c: Context<AppEnv>): Promise<Response> {
  const call = flowCall(c);
  const epoch = await keyCache.epoch(call.store.keys.prefix, () => call.store.keyEpoch.read());
  const pair = new WebSocketPair();
  const [client, server] = [pair[0], pair[1]];
  server.accept();
  new RpcSession(server, call, epoch).listen();
  return new Response(null, { status: 101, webSocket: client });
}
