import type { CommitPlan, Creation } from "../../shared/store/index.js";

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

/** A Durable Object value may hold 2 MB with its key; a plan is written in chunks well below. */
const CHUNK_CHARS = 500_000;
const HEAD = "pending";

/**
 * The write-ahead record of a flow's commit. A call to storage has three outcomes: applied, not
 * applied, and unknown (it timed out or the connection broke, yet Redis may still run it, even
 * much later). So before a commit goes out, its plan is written here; it is removed only once a
 * call of that same plan came back (the plan's guards make running it twice harmless). An object
 * that finds a pending plan (after an unknown outcome, or after it was evicted or reset mid-call)
 * runs it again before anything else, so nothing it commits later can be overtaken by the old
 * call landing late, and the effects the transition owes (waking the dispatcher) are not lost.
 */
export class PendingCommits {
  constructor(private readonly storage: DurableObjectStorage) {}

  /** Records the plan, durably, before it is sent (replacing one left behind, chunks and all). */
  async write(plan: PendingCommit): Promise<void> {
    await this.clear();
    const text = JSON.stringify(plan);
    const chunks: Record<string, string> = {};
    let n = 0;
    for (let at = 0; at < text.length; at += CHUNK_CHARS) chunks[`${HEAD}:${n++}`] = text.slice(at, at + CHUNK_CHARS);
    // put() takes at most 128 pairs at once.
    const entries = Object.entries(chunks);
    for (let i = 0; i < entries.length; i += 120) await this.storage.put(Object.fromEntries(entries.slice(i, i + 120)));
    await this.storage.put(HEAD, n);
  }

  /** The plan left pending, if any. */
  async read(): Promise<PendingCommit | undefined> {
    const n = await this.storage.get<number>(HEAD);
    if (n === undefined) return undefined;
    const names = Array.from({ length: n }, (_, i) => `${HEAD}:${i}`);
    let text = "";
    for (let i = 0; i < names.length; i += 120) {
      const got = await this.storage.get<string>(names.slice(i, i + 120));
      for (const name of names.slice(i, i + 120)) text += got.get(name) ?? "";
    }
    return JSON.parse(text) as PendingCommit;
  }

  /** Forgets the plan: its outcome is known. */
  async clear(): Promise<void> {
    const n = await this.storage.get<number>(HEAD);
    if (n === undefined) return;
    await this.storage.delete(HEAD);
    const names = Array.from({ length: n }, (_, i) => `${HEAD}:${i}`);
    for (let i = 0; i < names.length; i += 120) await this.storage.delete(names.slice(i, i + 120));
  }
}
