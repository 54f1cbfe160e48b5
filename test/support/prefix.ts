import type { Redis } from "../../shared/store/index.js";

/** A key prefix no other test file uses, so each file starts from an empty keyspace. */
export function freshPrefix(label: string): string {
  return `t:${label}:${crypto.randomUUID().slice(0, 8)}:`;
}

/** Deletes every key under `prefix` (SCAN, then UNLINK in batches). */
export async function deletePrefix(redis: Redis, prefix: string): Promise<number> {
  let cursor = "0";
  let deleted = 0;
  do {
    const [next, keys] = await redis.exec<[string, string[]]>(["SCAN", cursor, "MATCH", `${escapeGlob(prefix)}*`, "COUNT", "1000"]);
    cursor = next;
    if (keys.length > 0) deleted += Number(await redis.exec<number>(["UNLINK", ...keys]));
  } while (cursor !== "0");
  return deleted;
}

function escapeGlob(text: string): string {
  return text.replace(/[*?[\]\\]/g, "\\$&");
}
