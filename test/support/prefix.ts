import type { Keys } from "../../shared/keys.js";
import type { Redis } from "../../shared/store/redis.js";

/** A key prefix no other test file uses, so each file starts from an empty keyspace. */
export function freshPrefix(label: string): string {
  return `t:${label}:${crypto.randomUUID().slice(0, 8)}:`;
}

/**
 * Every key that starts with `prefix`, found by SCAN with its cursor followed to the end (one
 * SCAN step looks at only part of a keyspace other test files share).
 */
export async function keysUnder(redis: Redis, prefix: string): Promise<string[]> {
  const found: string[] = [];
  await scanPrefix(redis, prefix, async (keys) => {
    found.push(...keys);
  });
  return [...new Set(found)]; // SCAN may return a key more than once
}

/** Deletes every key under `prefix` (SCAN, then UNLINK in batches). */
export async function deletePrefix(redis: Redis, prefix: string): Promise<number> {
  let deleted = 0;
  await scanPrefix(redis, prefix, async (keys) => {
    deleted += Number(await redis.exec<number>(["UNLINK", ...keys]));
  });
  return deleted;
}

/** Hands each non-empty batch of keys under `prefix` to `batch`, until SCAN's cursor is back at 0. */
async function scanPrefix(redis: Redis, prefix: string, batch: (keys: string[]) => Promise<void>): Promise<void> {
  let cursor = "0";
  do {
    const [next, keys] = await redis.exec<[string, string[]]>([
      "SCAN",
      cursor,
      "MATCH",
      `${escapeGlob(prefix)}*`,
      "COUNT",
      "1000",
    ]);
    cursor = next;
    if (keys.length > 0) await batch(keys);
  } while (cursor !== "0");
}

export function escapeGlob(text: string): string {
  return text.replace(/[*?[\]\\]/g, "\\$&");
}

/**
 * How many job attempts wait in a context's ready queues (one per flow and script type or pinned
 * runner): every key under the prefix Keys.queue and Keys.pinnedQueue share, found by SCAN, summed.
 */
export async function queuedIn(redis: Redis, keys: Keys, contextId: number): Promise<number> {
  const prefix = keys.queue(contextId, "sh", 0).replace(/sh:0$/, "");
  const queues = await keysUnder(redis, prefix);
  let total = 0;
  for (const key of queues) total += Number(await redis.exec<number>(["LLEN", key]));
  return total;
}
