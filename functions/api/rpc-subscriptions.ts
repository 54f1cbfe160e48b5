import { z } from "zod";
import { FlowStreamEvent, Id } from "../../shared/model/index.js";
import { fieldProblem, toProblem } from "../core/errors.js";
import { Problem } from "../core/problem.js";
import { closeQuietly } from "../core/sockets.js";
import type { FlowCall } from "../service/call.js";
import { openFlowStream } from "../service/streams.js";
import { ProblemDocument } from "./rpc-dispatch.js";
import { method, type MethodTable } from "./rpc-methods.js";

/** How many subscriptions one session may hold at once. */
const MAX_SUBSCRIPTIONS = 100;
/** How often a subscription whose stream dropped is opened again before it is given up. */
const REOPEN_ATTEMPTS = 3;

const SubscribeParams = z
  .object({
    context_id: Id,
    id: Id,
    /** Events after this sequence number: 0 (the default) replays the flow's journal from its first event. */
    since: z.int().min(0).default(0),
  })
  .strict();
const SubscriptionHandle = z.object({ subscription: z.string() }).strict().meta({ id: "SubscriptionHandle" });
const UnsubscribeParams = z.object({ subscription: z.string().min(1).max(64) }).strict();

/** The notifications a session sends without being asked: their params, for the OpenRPC document. */
export const NOTIFICATIONS = {
  "flow.event": {
    summary:
      "An event of a subscribed flow (server to client): in seq order, each once, from the `since` asked for onwards",
    params: z.object({ subscription: z.string(), event: FlowStreamEvent }).strict(),
  },
  "flow.subscription_ended": {
    summary:
      "A subscription's stream ended and could not be opened again (server to client): `reason` is the problem; subscribe again with since = the last seq seen",
    params: z.object({ subscription: z.string(), reason: ProblemDocument }).strict(),
  },
} as const;

/** One subscription: a flow's event stream (a WebSocket on its object), forwarded as notifications. */
class Subscription {
  private upstream: WebSocket | undefined;
  private held: string[] | undefined = [];
  private closed = false;
  private failures = 0;

  constructor(
    readonly id: string,
    private readonly call: FlowCall,
    private readonly flow: { contextId: number; flowId: number },
    /** The seq of the last event forwarded: a reopened stream resumes after it, and nothing is sent twice. */
    private lastSeq: number,
    private readonly send: (text: string) => void,
    private readonly ended: (subscription: Subscription, reason: Problem) => void,
  ) {}

  /** Opens the stream; a problem (no such flow, not a reader) is thrown to the subscriber. */
  async open(): Promise<void> {
    const socket = await openFlowStream(this.call, this.flow.contextId, this.flow.flowId, this.lastSeq);
    // Closed while it opened (the session ended during a reopen): nobody wants it any more.
    if (this.closed) closeQuietly(socket, 1000, "unsubscribed");
    else this.attach(socket);
  }

  /** Lets events through: the answer naming the subscription was sent, so they come after it. */
  release(): void {
    const held = this.held ?? [];
    this.held = undefined;
    for (const text of held) this.send(text);
  }

  close(): void {
    this.closed = true;
    if (this.upstream) closeQuietly(this.upstream, 1000, "unsubscribed");
  }

  private attach(socket: WebSocket): void {
    this.upstream = socket;
    socket.addEventListener("message", (message) => this.forward(message.data));
    socket.addEventListener("close", () => this.dropped(socket));
    socket.addEventListener("error", () => this.dropped(socket));
  }

  private forward(data: unknown): void {
    if (this.closed || typeof data !== "string") return;
    const event = JSON.parse(data) as FlowStreamEvent;
    // After a reopen the object replays from lastSeq: anything at or before it was sent already.
    if (event.seq <= this.lastSeq) return;
    this.lastSeq = event.seq;
    this.failures = 0;
    this.notify(JSON.stringify({ jsonrpc: "2.0", method: "flow.event", params: { subscription: this.id, event } }));
  }

  /** Sends a notification, or holds it until the answer naming the subscription is out. */
  notify(text: string): void {
    if (this.held) this.held.push(text);
    else this.send(text);
  }

  /**
   * The object's end went away (it was reset, or the code deployed anew): the stream is opened
   * again from the last event forwarded, a few times, before the subscriber is told it ended.
   */
  private dropped(socket: WebSocket): void {
    if (this.closed || socket !== this.upstream) return;
    this.upstream = undefined;
    void this.reopen();
  }

  private async reopen(): Promise<void> {
    while (!this.closed) {
      try {
        await this.open();
        return;
      } catch (error) {
        const problem = toProblem(error);
        // A problem of the caller's (no longer a reader, the flow gone) will not mend by retrying.
        if (++this.failures >= REOPEN_ATTEMPTS || problem.status < 500) {
          this.closed = true;
          this.ended(this, problem);
          return;
        }
        await new Promise((resolve) => setTimeout(resolve, 250 * 2 ** this.failures));
      }
    }
  }
}

/** The subscriptions of one session. */
export class Subscriptions {
  private readonly open = new Map<string, Subscription>();
  /** Subscriptions whose stream is still opening: they count against the limit too. */
  private opening = 0;
  private next = 1;
  private ended = false;

  constructor(private readonly send: (text: string) => void) {}

  /** Subscribes to a flow; its events are held until `release` is called on what this returns. */
  async subscribe(call: FlowCall, params: z.output<typeof SubscribeParams>): Promise<Subscription> {
    if (this.open.size + this.opening >= MAX_SUBSCRIPTIONS) {
      throw fieldProblem([
        { field: "params", message: `a session holds at most ${MAX_SUBSCRIPTIONS} subscriptions: unsubscribe first` },
      ]);
    }
    const id = String(this.next++);
    const flow = { contextId: params.context_id, flowId: params.id };
    const subscription = new Subscription(id, call, flow, params.since, this.send, (s, reason) => {
      this.open.delete(s.id);
      const params = { subscription: s.id, reason: reason.toJSON() };
      // Held like its events: never ahead of the answer that named the subscription.
      s.notify(JSON.stringify({ jsonrpc: "2.0", method: "flow.subscription_ended", params }));
    });
    this.opening++;
    try {
      await subscription.open();
    } finally {
      this.opening--;
    }
    if (this.ended) {
      // The session closed while the stream was opening: nobody is left to tell.
      subscription.close();
      throw new Problem("conflict", "the session ended");
    }
    this.open.set(id, subscription);
    return subscription;
  }

  unsubscribe(id: string): true {
    const subscription = this.open.get(id);
    if (!subscription) throw new Problem("not-found", `no subscription ${id} in this session`);
    this.open.delete(id);
    subscription.close();
    return true;
  }

  /** Closes every subscription: the session ended. */
  closeAll(): void {
    this.ended = true;
    for (const subscription of this.open.values()) subscription.close();
    this.open.clear();
  }
}

/** What a frame of a session runs with besides its call: the session's subscriptions, and the new ones to release. */
export interface Frame {
  subscriptions: Subscriptions;
  created: { release(): void }[];
}

/** The frame each session call belongs to (set by the session; POST /rpc does not offer these methods). */
export const frames = new WeakMap<FlowCall, Frame>();

function frameOf(call: FlowCall): Frame {
  const frame = frames.get(call);
  if (!frame) throw new Error("a session method was called outside a WebSocket session");
  return frame;
}

/** The methods only a WebSocket session has: they deliver notifications, which need a connection. */
export const SOCKET_METHODS: MethodTable = {
  "flow.subscribe": method({
    summary:
      "Subscribe to a flow's events (readers): they arrive as flow.event notifications, after this call's answer",
    params: SubscribeParams,
    result: SubscriptionHandle,
    run: async (call, p) => {
      const frame = frameOf(call);
      const subscription = await frame.subscriptions.subscribe(call, p);
      frame.created.push(subscription);
      return { subscription: subscription.id };
    },
  }),
  "flow.unsubscribe": method({
    summary: "End a subscription: no flow.event of it follows this call's answer",
    params: UnsubscribeParams,
    result: z.literal(true),
    run: async (call, p) => frameOf(call).subscriptions.unsubscribe(p.subscription),
  }),
};
