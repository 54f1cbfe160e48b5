import type { Keys } from "../keys.js";
import type { Message } from "../model/index.js";
import { decodeRecord, encodeRecord, pairsToObject } from "./codec.js";
import { ConflictError } from "./errors.js";
import { codecs } from "./layouts.js";
import { callRedis, type Redis } from "./redis.js";
import { postMessage, readInbox, settleMessage } from "./scripts/messages.js";

/** Messages between actors: posting onto msg_out, settling into inboxes, reading inboxes. */
export class MessageStore {
  constructor(
    private readonly redis: Redis,
    private readonly keys: Keys,
  ) {}

  /** Allocates a message id in the sender's space. */
  async allocateId(contextId: number, callerId: number): Promise<number> {
    return Number(await callRedis(() => this.redis.exec<number>(["HINCRBY", this.keys.ids(contextId), `message:${callerId}`, "1"])));
  }

  /** Stores a message and puts it on msg_out in one step. */
  async post(message: Message): Promise<void> {
    const key = this.keys.message(message.context_id, message.caller_id, message.id);
    const fields = Object.entries(encodeRecord(codecs.message, message)).flat();
    const posted = await postMessage.run(
      this.redis,
      [key, this.keys.index(message.context_id, "message"), this.keys.msgOut(message.context_id)],
      [`${message.caller_id}:${message.id}`, message.id, crypto.randomUUID(), ...fields],
    );
    if (posted !== 1) throw new ConflictError("message", String(message.id), `message id ${message.id} is taken`);
  }

  /** Puts a relayed message into its recipient's inbox (once), or marks it refused. */
  async settle(message: Message, outcome: { deliver: true } | { deliver: false; reason: string }): Promise<boolean> {
    const key = this.keys.message(message.context_id, message.caller_id, message.id);
    const inbox = this.keys.msgIn(message.context_id, message.to ?? message.caller_id);
    const now = Math.floor(Date.now() / 1000);
    const args = outcome.deliver ? ["deliver", now] : ["refuse", now, outcome.reason.slice(0, 256)];
    return (await settleMessage.run(this.redis, [key, inbox, this.keys.inflight(message.context_id)], args)) === 1;
  }

  /** An actor's oldest messages, popped (marked processed) or only looked at. */
  async inbox(contextId: number, actorId: number, max: number, pop: boolean): Promise<Message[]> {
    const reply = await readInbox.run(this.redis, [this.keys.msgIn(contextId, actorId)], [max, pop ? "pop" : "peek", Math.floor(Date.now() / 1000)]);
    const out: Message[] = [];
    if (!Array.isArray(reply)) return out;
    for (let i = 0; i + 1 < reply.length; i += 2) {
      out.push(decodeRecord(codecs.message, String(reply[i]), pairsToObject(reply[i + 1] as string[])));
    }
    return out;
  }
}
