import { expect } from "vitest";
import type { FlowStreamEvent } from "../../shared/model/index.js";
import { eventually } from "../support/eventually.js";
import type { TestWorker } from "./harness.js";

/** A JSON-RPC answer or notification as it came over the socket. */
export interface Frame {
  jsonrpc: "2.0";
  id?: string | number | null;
  result?: unknown;
  error?: { code: number; message: string; data?: { type?: string; field?: string } };
  method?: string;
  params?: { subscription: string; event: FlowStreamEvent; reason?: { type: string } };
}

/**
 * The client end of a JSON-RPC session (GET /rpc, Upgrade: websocket) opened on the test's
 * Worker: keeps every frame it receives, in order, so a test can tell what came before what.
 */
export class RpcSocket {
  /** Every frame received, parsed, in the order it came (a batch's answer is one array frame). */
  readonly frames: (Frame | Frame[])[] = [];
  closed: { code: number; reason: string } | undefined;
  private nextId = 1;

  private constructor(readonly socket: WebSocket) {
    socket.addEventListener("message", (m) => {
      this.frames.push(JSON.parse(m.data as string) as Frame | Frame[]);
    });
    socket.addEventListener("close", (e) => {
      this.closed = { code: e.code, reason: e.reason };
    });
  }

  /** Sends the upgrade request; it must be answered 101. */
  static async open(w: TestWorker, upgrade: Request): Promise<RpcSocket> {
    const response = await w.fetch(upgrade);
    if (response.status !== 101) throw new Error(`not upgraded: ${response.status} ${await response.text()}`);
    const socket = response.webSocket as WebSocket;
    socket.accept();
    return new RpcSocket(socket);
  }

  send(text: string): void {
    this.socket.send(text);
  }

  /** Calls a method and resolves with its answer frame (result or error). */
  async call(method: string, params: unknown = {}): Promise<Frame> {
    const id = this.nextId++;
    this.send(JSON.stringify({ jsonrpc: "2.0", id, method, params }));
    return this.answer(id);
  }

  /** Calls a method that must succeed; resolves with its result. */
  async result<T = unknown>(method: string, params: unknown = {}): Promise<T> {
    const answer = await this.call(method, params);
    expect(answer.error, `${method} failed`).toBeUndefined();
    return answer.result as T;
  }

  /** The answer with this id, once it came. */
  answer(id: string | number): Promise<Frame> {
    return eventually(() => this.singles().find((f) => f.id === id), 10_000, 10, `the answer to call ${id}`);
  }

  /** The first frame that satisfies `match`, once it came. */
  frame(match: (frame: Frame | Frame[]) => boolean, what: string): Promise<Frame | Frame[]> {
    return eventually(() => this.frames.find(match), 10_000, 10, what);
  }

  /** Where a frame is in the order received. */
  indexOf(frame: Frame | Frame[]): number {
    return this.frames.indexOf(frame);
  }

  /** The flow.event notifications of a subscription, in order, with their place among all frames. */
  events(subscription: string): { event: FlowStreamEvent; at: number }[] {
    return this.frames.flatMap((f, at) =>
      !Array.isArray(f) && f.method === "flow.event" && f.params?.subscription === subscription
        ? [{ event: f.params.event, at }]
        : [],
    );
  }

  /** Waits until a subscription delivered an event that satisfies `match`; resolves with all its events so far. */
  untilEvent(subscription: string, match: (e: FlowStreamEvent) => boolean, what: string) {
    return eventually(
      () => {
        const events = this.events(subscription);
        return events.some((e) => match(e.event)) ? events : undefined;
      },
      10_000,
      10,
      what,
    );
  }

  close(): void {
    this.socket.close(1000, "done");
  }

  private singles(): Frame[] {
    return this.frames.filter((f): f is Frame => !Array.isArray(f));
  }
}
