import type { Keys } from "../keys.js";
import { matchesFilters, type Flow, type FlowStatus, type LabelFilter } from "../model/index.js";
import { decodeRecord } from "./codec.js";
import { codecs } from "./layouts.js";
import { readHashes, readIndexPage, toPage, type Page } from "./reads.js";
import { callRedis, type Redis } from "./redis.js";

/**
 * How many flows of the index one filtered page looks through at most. Names and labels have no
 * index of their own (an index per label would cost every flow's creation and removal a command
 * per label): a filtered page reads this many flows' `name` and `labels` (one HMGET each, in one
 * round trip) from `offset` on, and says in `next` where the next page goes on from.
 */
export const FILTER_WINDOW = 200;

/** What a list of flows is narrowed to, and in which order. */
export interface FlowListQuery {
  /** Only flows in this status (its own index, so no window: the page is as full as any). */
  status?: FlowStatus | undefined;
  /** Only flows whose name holds this (case-insensitive). */
  name?: string | undefined;
  /** Only flows with every one of these labels (with that value, when given). */
  labels?: LabelFilter[] | undefined;
  /** Newest first (highest id first) rather than oldest first. */
  newest?: boolean | undefined;
  offset: number;
  limit: number;
}

/**
 * A page of a context's flows: by id (oldest first, or newest first), all of them or those in
 * one status. With a name or label filter, at most FILTER_WINDOW flows of that index are looked
 * through from `offset`: the page holds those that match, up to `limit`, and `next` is where the
 * look stopped, so a page may hold fewer than `limit` flows (even none) with more to come.
 * `total` is always the number of flows in the index looked through.
 */
export async function listFlows(redis: Redis, keys: Keys, contextId: number, q: FlowListQuery): Promise<Page<Flow>> {
  const index = q.status ? keys.flowsByStatus(contextId, q.status) : keys.index(contextId, "flow");
  const filtered = q.name !== undefined || (q.labels?.length ?? 0) > 0;
  const window = filtered ? FILTER_WINDOW : q.limit;
  const { members, total } = await readIndexPage(redis, index, q.offset, window, q.newest);
  const flowKeys = members.map((id) => keys.flow(contextId, Number(id)));
  let chosen = flowKeys;
  let looked = members.length;
  if (filtered) {
    const facts = await readIdentities(redis, flowKeys);
    chosen = [];
    looked = 0;
    for (const [i, key] of flowKeys.entries()) {
      if (chosen.length === q.limit) break;
      looked = i + 1;
      const flow = facts[i];
      if (flow && matchesFilters(flow, { ...(q.name !== undefined ? { name: q.name } : {}), labels: q.labels ?? [] }))
        chosen.push(key);
    }
  }
  const hashes = await readHashes(redis, chosen);
  const items = hashes.flatMap((h, i) => (h ? [decodeRecord(codecs.flow, chosen[i] as string, h)] : []));
  return toPage(items, q.offset, looked, total);
}

/** Each flow's name and labels (undefined for a flow that is gone), in one round trip. */
async function readIdentities(
  redis: Redis,
  flowKeys: string[],
): Promise<({ name?: string; labels?: Record<string, string> } | undefined)[]> {
  if (flowKeys.length === 0) return [];
  const replies = await callRedis(async () => {
    const p = redis.pipeline();
    for (const key of flowKeys) p.hmget(key, "name", "labels", "id");
    return (await p.exec()) as unknown as ((string | null)[] | null)[];
  });
  return replies.map((reply) => {
    // A flow that is gone has no id: left out, as a list leaves out an index entry without a record.
    if (!reply || reply[2] === null || reply[2] === undefined) return undefined;
    const [name, labels] = reply;
    return {
      ...(typeof name === "string" ? { name } : {}),
      ...(typeof labels === "string" ? { labels: parseLabels(labels) } : {}),
    };
  });
}

/** Stored labels (JSON), or none when they do not parse (the record's own read names the fault). */
function parseLabels(text: string): Record<string, string> {
  try {
    const value: unknown = JSON.parse(text);
    return value && typeof value === "object" ? (value as Record<string, string>) : {};
  } catch {
    return {};
  }
}
