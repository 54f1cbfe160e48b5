import { inboxEntry, parseInboxEntry, parseMessageKey, type Keys } from "../keys.js";
import type { Message } from "../model/index.js";
import { decodeKeyedHashes, encodePairs } from "./codec.js";
import { ConflictError, StorageUnavailableError } from "./errors.js";
import { codecs, layouts } from "./layouts.js";
import { callRedis, type Redis } from "./redis.js";
import { Repository, type RecordLayout, type RecordRef } from "./repository.js";
import { ScriptKeys } from "./script.js";
import { createRecord } from "./scripts/record.js";
import { expireInbox, readInbox, settleMessage } from "./scripts/messages.js";

/** Messages: their ids, posting between actors onto msg_out, settling into inboxes, reading inboxes. */
export class MessageStore {
  private readonly layout: RecordLayout<Message>;
  private readonly records: Repository<Message>;

  constructor(
    private readonly redis: Redis,
    private readonly keys: Keys,
    private readonly now: () => number,
  ) {
    this.layout = layouts(keys).message;
    this.records = new Repository(redis, this.layout, now);
  }

  /** Loads a message or throws NotFoundError. */
  load(ref: RecordRef): Promise<Message> {
    return this.records.load(ref);
  }

  /** Allocates `count` consecutive message ids in the sender's space; resolves with the first. */
  async allocateIds(contextId: number, callerId: number, count = 1): Promise<number> {
    const counter = this.layout.counter({ context_id: contextId, caller_id: callerId });
    const last = Number(
      await callRedis(() => this.redis.exec<number>(["HINCRBY", counter.key, counter.field, String(count)])),
    );
    return last - count + 1;
  }

  /**
   * Allocates `jobs` consecutive job ids and `messages` consecutive message ids in the caller's
   * spaces (for jobs joining a running flow); resolves with the first of each. Two commands in
   * one round trip (the client pipelines calls made together); ids a caller does not use are
   * wasted, never given twice.
   */
  async allocateGrowth(
    contextId: number,
    callerId: number,
    jobs: number,
    messages: number,
  ): Promise<{ job: number; message: number }> {
    const ids = this.keys.ids(contextId);
    const [lastJob, lastMessage] = await callRedis(() =>
      Promise.all([
        this.redis.exec<number>(["HINCRBY", ids, this.keys.jobCounter(callerId), String(jobs)]),
        this.redis.exec<number>(["HINCRBY", ids, this.keys.messageCounter(callerId), String(messages)]),
      ]),
    );
    return { job: Number(lastJob) - jobs + 1, message: Number(lastMessage) - messages + 1 };
  }

  /** Stores a message and puts it on msg_out in one step. */
  async post(message: Message): Promise<void> {
    const keys = [this.layout.key(message), this.layout.indexKey(message), this.keys.msgOut(message.context_id)];
    const args = [
      this.layout.indexMember(message),
      message.id,
      crypto.randomUUID(),
      ...encodePairs(codecs.message, message),
    ];
    if ((await createRecord.run(this.redis, keys, args)) !== 1)
      throw new ConflictError("message", String(message.id), `message id ${message.id} is taken`);
  }

  /** Puts a relayed message into its recipient's inbox (once), or marks it refused. */
  async settle(message: Message, outcome: { deliver: true } | { deliver: false; reason: string }): Promise<boolean> {
    const recipient = message.to ?? message.caller_id;
    const inbox = this.keys.msgIn(message.context_id, recipient);
    const key = this.layout.key(message);
    const args = outcome.deliver
      ? ["deliver", this.now(), "", inboxEntry(recipient, key)]
      : ["refuse", this.now(), outcome.reason.slice(0, 256), ""];
    return (
      (await settleMessage.run(
        this.redis,
        [key, inbox, this.keys.inflight(message.context_id), this.keys.inboxDue(message.context_id)],
        args,
      )) === 1
    );
  }

  /**
   * An actor's oldest messages, popped (read: marked processed, and removed) or only looked at:
   * the inbox's head read (one LRANGE, all an empty inbox costs), then its messages in one script
   * given each of their keys (readInbox), read again should another reader have popped first.
   */
  async inbox(contextId: number, actorId: number, max: number, pop: boolean): Promise<Message[]> {
    const inbox = this.keys.msgIn(contextId, actorId);
    for (let attempt = 0; ; attempt++) {
      const head = await callRedis(() => this.redis.exec<string[]>(["LRANGE", inbox, "0", String(max - 1)]));
      if (head.length === 0) return [];
      const members = head.map((key) => ((m) => (m ? `${m.callerId}:${m.id}` : ""))(parseMessageKey(String(key))));
      const reply = await readInbox.run(
        this.redis,
        [inbox, this.keys.inboxDue(contextId), this.keys.index(contextId, "message"), ...head.map(String)],
        [pop ? "pop" : "peek", this.now(), actorId, ...members],
      );
      if (reply !== -1) return decodeKeyedHashes(codecs.message, reply).map(({ record }) => record);
      if (attempt >= 4) throw new StorageUnavailableError(`the inbox ${inbox} kept changing under its reads`);
    }
  }

  /**
   * Removes messages left unread in inboxes since before `before` (epoch ms), oldest first, at
   * most `limit`; resolves with how many went.
   */
  async expireUnread(contextId: number, before: number, limit: number): Promise<number> {
    const due = this.keys.inboxDue(contextId);
    const entries = await callRedis(() =>
      this.redis.exec<string[]>(["ZRANGEBYSCORE", due, "-inf", `(${before}`, "LIMIT", "0", String(limit)]),
    );
    if (entries.length === 0) return 0;
    // The script is given every key it touches (ScriptKeys: each recipient's inbox once, each
    // message's hash): an entry naming a key outside the context is only taken off inbox_due.
    const keys = new ScriptKeys([due, this.keys.index(contextId, "message")]);
    const namespace = this.keys.namespace(contextId);
    const args = entries.flatMap((entry) => {
      const parsed = parseInboxEntry(String(entry));
      if (!parsed || !parsed.messageKey.startsWith(namespace)) return [String(entry), 0, 0, ""];
      const message = parseMessageKey(parsed.messageKey);
      const member = message ? `${message.callerId}:${message.id}` : "";
      return [String(entry), keys.at(this.keys.msgIn(contextId, parsed.actorId)), keys.at(parsed.messageKey), member];
    });
    return Number(await expireInbox.run(this.redis, keys.list, args));
  }
}
