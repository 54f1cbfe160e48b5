import { changedJobs, jobJournalOf, type FlowState, type JobJournal, type Journal } from "../../shared/flow/index.js";

/** One key per job in progress. */
const PREFIX = "journal:";
/** put() and delete() take at most 128 keys at once. */
const CHUNK = 120;
/**
 * Keys written together, in one atomic write: a group's calls are issued with no await between
 * them, and storage coalesces them. A coalesced write costs more per put() the more it holds:
 * 10,000 entries (a 10,000-job flow's start) took 115 ms in one write in a test object, 31 ms in
 * groups of 1,000, one after the other.
 */
const GROUP = 1_000;

/**
 * The flow's journal in its Durable Object's storage: what Redis does not hold about each job in
 * progress (see `jobJournalOf`), under one key per job. A commit writes only the jobs it changed,
 * so its cost follows the batch, not the flow: rewritten whole after every commit, the journal of a
 * 1,000-job flow was a third of the object's CPU (a 100 KB value serialized per batch).
 *
 * A diff is only right against the state storage holds: the object remembers which state it last
 * wrote, and writes the whole journal (dropping keys of jobs no longer in progress) whenever the
 * state before the batch is not that one — after a read back from storage, after memory was
 * forgotten, or the first time.
 */
export class FlowJournal {
  /** The state whose journal storage holds, as far as this object knows. */
  private written: FlowState | undefined;

  constructor(private readonly storage: DurableObjectStorage) {}

  /** The stored journal. */
  async read(): Promise<Journal> {
    const entries = await this.storage.list<JobJournal>({ prefix: PREFIX });
    const journal: Journal = {};
    for (const [key, entry] of entries) journal[Number(key.slice(PREFIX.length))] = entry;
    return journal;
  }

  /** Writes the journal of `after`, which a batch reached from `before`. */
  async write(before: FlowState, after: FlowState): Promise<void> {
    const diff = this.written !== undefined && before === this.written;
    // Until this write is through, what storage holds is not known for sure.
    this.written = undefined;
    if (diff) await this.writeChanges(before, after);
    else await this.writeWhole(after);
    this.written = after;
  }

  private async writeChanges(before: FlowState, after: FlowState): Promise<void> {
    const puts: Record<string, JobJournal> = {};
    const deletes: string[] = [];
    for (const id of changedJobs(before, after)) {
      const now = after.jobs.job(id);
      const was = before.jobs.get(id);
      const entry = jobJournalOf(now);
      if (entry) puts[PREFIX + id] = entry;
      else if (was && jobJournalOf(was)) deletes.push(PREFIX + id);
    }
    await this.apply(puts, deletes);
  }

  private async writeWhole(state: FlowState): Promise<void> {
    const puts: Record<string, JobJournal> = {};
    for (const id of state.order) {
      const entry = jobJournalOf(state.jobs.job(id));
      if (entry) puts[PREFIX + id] = entry;
    }
    const kept = await this.storage.list({ prefix: PREFIX });
    const deletes = [...kept.keys()].filter((key) => !(key in puts));
    await this.apply(puts, deletes);
  }

  /**
   * Every chunk of a group is issued before any is awaited: writes with no await between them are
   * coalesced into one atomic write, so a crash never leaves half a batch's entries new and half
   * old — for a batch of up to GROUP keys (every flow of up to 1,000 jobs). A larger one is
   * written a group at a time: a crash between groups leaves some jobs' entries as they were,
   * which is what a commit whose journal write never came leaves too. Each entry is its own
   * job's, and the rebuild takes one only when it speaks of the attempt storage holds.
   */
  private async apply(puts: Record<string, JobJournal>, deletes: string[]): Promise<void> {
    const writes: (() => Promise<unknown>)[] = [];
    const entries = Object.entries(puts);
    for (let i = 0; i < entries.length; i += CHUNK) {
      const chunk = Object.fromEntries(entries.slice(i, i + CHUNK));
      writes.push(() => this.storage.put(chunk));
    }
    for (let i = 0; i < deletes.length; i += CHUNK) {
      const chunk = deletes.slice(i, i + CHUNK);
      writes.push(() => this.storage.delete(chunk));
    }
    const perGroup = Math.ceil(GROUP / CHUNK);
    for (let i = 0; i < writes.length; i += perGroup) await Promise.all(writes.slice(i, i + perGroup).map((w) => w()));
  }
}
