import { closeSync, existsSync, openSync, readdirSync, readSync, rmSync, statSync } from "node:fs";
import path from "node:path";

/** What `pruneEmptyObjects` found in a storage folder. */
export interface StorageCount {
  /** Objects with storage left, by namespace folder. */
  objects: Record<string, number>;
  /** Files of objects whose storage was deleted (retention, a context's deletion), removed. */
  pruned: number;
}

const MAGIC = "SQLite format 3\0";

/** Whether a SQLite file holds no table: one page (the schema page) and nothing in a write-ahead log. */
function emptySqlite(file: string): boolean {
  const size = statSync(file).size;
  if (size === 0) return true;
  const header = Buffer.alloc(100);
  const fd = openSync(file, "r");
  try {
    if (readSync(fd, header, 0, 100, 0) < 100) return false;
  } finally {
    closeSync(fd);
  }
  if (header.toString("latin1", 0, 16) !== MAGIC) return false;
  const raw = header.readUInt16BE(16);
  const pageSize = raw === 1 ? 65536 : raw;
  const wal = `${file}-wal`;
  return size <= pageSize && (!existsSync(wal) || statSync(wal).size === 0);
}

/**
 * Counts the Durable Objects in a storage folder and removes the files of those whose storage
 * was deleted. workerd keeps an object's SQLite file after `deleteAll` (one empty 4 KiB page):
 * every flow ever removed by retention would leave one behind, and the folder would grow by a
 * file per flow forever. Such a file holds nothing (no table, no alarm), so removing it is the
 * same as the object never having stored anything. Run only while workerd is stopped (serve
 * holds the data folder's lock): never under a live object.
 */
export function pruneEmptyObjects(storage: string): StorageCount {
  const count: StorageCount = { objects: {}, pruned: 0 };
  if (!existsSync(storage)) return count;
  for (const namespace of readdirSync(storage, { withFileTypes: true })) {
    if (!namespace.isDirectory()) continue;
    const dir = path.join(storage, namespace.name);
    let objects = 0;
    for (const name of readdirSync(dir)) {
      // metadata.sqlite is workerd's own index of the namespace's alarms.
      if (!name.endsWith(".sqlite") || name === "metadata.sqlite") continue;
      const file = path.join(dir, name);
      if (!emptySqlite(file)) {
        objects++;
        continue;
      }
      for (const suffix of ["", "-wal", "-shm"]) rmSync(`${file}${suffix}`, { force: true });
      count.pruned++;
    }
    count.objects[namespace.name] = objects;
  }
  return count;
}
