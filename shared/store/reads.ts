import { pairsToObject } from "./codec.js";
import { callRedis, type Redis } from "./redis.js";
import type { Page } from "../model/index.js";

export type { Page };

/**
 * One page of an index sorted set: `limit` members from `offset` (highest score first with
 * `rev`) and the index's size, in one round trip.
 */
export async function readIndexPage(
  redis: Redis,
  index: string,
  offset: number,
  limit: number,
  rev = false,
): Promise<{ members: string[]; total: number }> {
  const [members, total] = await callRedis(async () => {
    const p = redis.pipeline();
    if (rev) p.zrange(index, offset, offset + limit - 1, { rev: true });
    else p.zrange(index, offset, offset + limit - 1);
    p.zcard(index);
    return (await p.exec()) as [string[], number];
  });
  return { members: members.map(String), total: Number(total) };
}

/**
 * The page of `items` read for `members` index entries at `offset` (items whose record has gone
 * are left out by the caller, so `members` counts the entries, not the items).
 */
export function toPage<T>(items: T[], offset: number, members: number, total: number): Page<T> {
  const next = offset + members;
  return { items, total, ...(members > 0 && next < total ? { next } : {}) };
}

/** One hash, or null when it does not exist. */
export async function readHash(redis: Redis, key: string): Promise<Record<string, string> | null> {
  const pairs = await callRedis(() => redis.exec<string[]>(["HGETALL", key]));
  return pairs && pairs.length > 0 ? pairsToObject(pairs) : null;
}

/**
 * Most hashes one request reads. A flow of 10,000 jobs is read back with as many job records and
 * at least as many messages, some 12 MB together, past what a storage request may answer
 * (docs/limits.md): it is read in pipelines of this many hashes, side by side.
 */
export const HASHES_PER_READ = 2000;

/** Many hashes in one round trip (pipelines of HASHES_PER_READ, sent together); null where one does not exist. */
export async function readHashes(redis: Redis, keys: string[]): Promise<(Record<string, string> | null)[]> {
  if (keys.length === 0) return [];
  const slices: string[][] = [];
  for (let at = 0; at < keys.length; at += HASHES_PER_READ) slices.push(keys.slice(at, at + HASHES_PER_READ));
  const replies = await Promise.all(
    slices.map((slice) =>
      callRedis(async () => {
        const p = redis.pipeline();
        for (const key of slice) p.hgetall(key);
        return (await p.exec()) as unknown as (string[] | null)[];
      }),
    ),
  );
  return replies.flat().map((r) => (r && r.length > 0 ? pairsToObject(r) : null));
}
