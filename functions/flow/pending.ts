import type { CommitPlan, Creation } from "../../shared/store/index.js";
import type { Forgetful } from "./incarnation.js";

/**
 * What of a commit must survive the object: the script call (a commit's, or a creation's with
 * its first commit) and the calls after it when there are several, and what it owes dispatch.
 */
export type PendingCommit = Pick<CommitPlan, "keys" | "args" | "queued" | "freed" | "released" | "notifies"> &
  Partial<Pick<CommitPlan, "more" | "sections">> &
  Partial<Pick<Creation, "creates" | "caller">> & {
    /**
     * The call went out with claims for the flow's own work: if it ran, what it claimed waits for
     * the dispatcher's reaper (a plan run again claims nothing), which its wake asks for.
     */
    claimed?: boolean;
  };

/** A row of SQL may hold 2 MB; a plan is written in chunks well below. */
const CHUNK_CHARS = 500_000;

/**
 * The write-ahead record of a flow's commit. A call to storage has three outcomes: applied, not
 * applied, and unknown (it timed out or the connection broke, yet Redis may still run it, even
 * much later). So before a commit goes out, its plan is written here; it is removed only once a
 * call of that same plan came back (the plan's guards make running it twice harmless). An object
 * that finds a pending plan (after an unknown outcome, or after it was evicted or reset mid-call)
 * runs it again before anything else, so nothing it commits later can be overtaken by the old
 * call landing late, and the effects the transition owes (waking the dispatcher) are not lost.
 *
 * It is kept in the object's SQL table `pending`, in chunks, not as key-value entries: values of
 * megabytes held in the key-value cache (a 10,000-job flow's creation plans some 6 MB) made every
 * later put() of the object slow (the journal's 10,000 entries after it: 4 to 7 s instead of
 * 0.1). Statements with no await between them are one atomic write: a plan is replaced whole;
 * and as for any write, nothing leaves the object (the commit's call) before it is durable.
 */
export class PendingCommits implements Forgetful {
  /** Whether the table is known to exist: made once per object's life, and again after a wipe. */
  private ready = false;

  constructor(private readonly storage: DurableObjectStorage) {}

  /** The table, made when missing (a wipe drops every table with the keys: see forget). */
  private get sql(): SqlStorage {
    if (!this.ready) {
      this.storage.sql.exec("CREATE TABLE IF NOT EXISTS pending (n INTEGER PRIMARY KEY, chunk TEXT NOT NULL)");
      this.ready = true;
    }
    return this.storage.sql;
  }

  /** Storage was wiped (its tables dropped): the table is made again on next use. */
  forget(): void {
    this.ready = false;
  }

  /** Records the plan, durably, before it is sent (replacing one left behind, chunks and all). */
  async write(plan: PendingCommit): Promise<void> {
    const text = JSON.stringify(plan);
    const sql = this.sql;
    sql.exec("DELETE FROM pending");
    for (let at = 0, n = 0; at < text.length; at += CHUNK_CHARS, n++)
      sql.exec("INSERT INTO pending (n, chunk) VALUES (?, ?)", n, text.slice(at, at + CHUNK_CHARS));
  }

  /** The plan left pending, if any. */
  async read(): Promise<PendingCommit | undefined> {
    const rows = this.sql.exec<{ chunk: string }>("SELECT chunk FROM pending ORDER BY n").toArray();
    return rows.length > 0 ? (JSON.parse(rows.map((r) => r.chunk).join("")) as PendingCommit) : undefined;
  }

  /** Forgets the plan: its outcome is known. */
  async clear(): Promise<void> {
    this.sql.exec("DELETE FROM pending");
  }
}
