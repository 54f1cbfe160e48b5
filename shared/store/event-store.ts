import { parseWaitMember, waitMember, type Keys } from "../keys.js";
import type { ResultMap } from "../model/index.js";
import { EVENT_LIMITS } from "../model/event.js";
import { callRedis, type Redis } from "./redis.js";
import { sendEvent } from "./scripts/events.js";

/** An event as a context keeps it for waits that start later. */
export interface KeptEvent {
  id: string;
  data: ResultMap;
  /** When it came (epoch ms). */
  at: number;
}

/** What sending an event found: the waits it matched (`<flow>, <job>`), and whether it was sent before. */
export interface EventTaken {
  duplicate: boolean;
  /** The digest the id was first sent with: another one means the id names another event. */
  digest: string;
  waits: { flowId: number; jobId: number }[];
  /** More waits than one event resumes were waiting. */
  more: boolean;
}

/**
 * Events for a context's waits (docs/flows.md, "Events"): the waits of each event name and key
 * are indexed (the commit that starts a wait adds it, the one that ends it removes it, see
 * commit-sections.ts), so sending an event reads one index, however many waits and flows the
 * context has.
 */
export class EventStore {
  constructor(
    private readonly redis: Redis,
    private readonly keys: Keys,
  ) {}

  /** Takes an event (sendEvent): the waits it matched, once per id. */
  async send(
    contextId: number,
    event: { id: string; name: string; key: string; data: ResultMap; digest: string },
    lookbackSeconds: number,
    now: number,
  ): Promise<EventTaken> {
    const kept: KeptEvent = { id: event.id, data: event.data, at: now };
    const reply = (await sendEvent.run(
      this.redis,
      [
        this.keys.sentEvent(contextId, event.id),
        this.keys.waits(contextId, event.name, event.key),
        this.keys.keptEvents(contextId, event.name, event.key),
      ],
      [
        event.digest,
        now,
        lookbackSeconds * 1000,
        JSON.stringify(kept),
        EVENT_LIMITS.idSeconds,
        EVENT_LIMITS.waitsPerEvent,
        EVENT_LIMITS.keptPerKey,
      ],
    )) as [number, string];
    const [digest = "", members = "", more = "0"] = String(reply[1]).split("|");
    const waits = members === "" ? [] : members.split(",").flatMap((m) => parseWaitMember(m) ?? []);
    return { duplicate: Number(reply[0]) === 1, digest, waits, more: more === "1" };
  }

  /**
   * The event a wait that just started takes from those the context kept for its name and key:
   * the earliest still kept (one read), or null.
   */
  async kept(contextId: number, name: string, key: string, now: number): Promise<KeptEvent | null> {
    const found = await callRedis(() =>
      this.redis.exec<string[]>([
        "ZRANGE",
        this.keys.keptEvents(contextId, name, key),
        `(${now}`,
        "+inf",
        "BYSCORE",
        "LIMIT",
        "0",
        "1",
      ]),
    );
    return found[0] ? (JSON.parse(found[0]) as KeptEvent) : null;
  }

  /** Drops a wait from its index (its flow is gone: nothing will end it there). */
  async dropWait(contextId: number, name: string, key: string, wait: { flowId: number; jobId: number }): Promise<void> {
    await callRedis(() =>
      this.redis.exec(["ZREM", this.keys.waits(contextId, name, key), waitMember(wait.flowId, wait.jobId)]),
    );
  }
}
