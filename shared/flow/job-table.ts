/** What a table holds: records with an id (a flow's JobState; generic, so this module imports nothing). */
export interface Keyed {
  readonly id: number;
}

/**
 * A flow's jobs by id: an immutable, persistent table in which a transition pays for the jobs it
 * changes, not for the flow. A plain record copied by every transition made a flow quadratic (98
 * ms of copies at 1,000 jobs, 2.3 s at 5,000); here a table is a 32-way trie over the job id, a
 * get walks its few levels (4 for ids under a million, 6 under a billion), and a set copies only
 * the path to its job (at most 32 slots a level), leaving every other node shared with the table
 * it came from. A job unchanged between two tables is the same object in both, which is what
 * `changedJobs` (draft.ts) and `diff` rely on.
 *
 * Ids are non-negative safe integers (job ids are counters: a flow's are a block, jobs added at
 * run time take later ones). The trie grows a level when an id beyond it comes, so a flow can
 * grow to any size at the cost of one path per new job. A `JobTableDraft` is a transient
 * builder: it copies each node it touches once, then writes into its copies in place, until it
 * is sealed; a draft of a transition that changes k jobs copies O(k · depth) nodes.
 */
export class JobTable<T extends Keyed> {
  /** @internal The trie's root (null while empty), how many levels it has, and how many jobs. */
  protected constructor(
    protected root: Node | null,
    protected levels: number,
    protected count: number,
  ) {}

  /** The table with no jobs. */
  static empty<T extends Keyed>(): JobTable<T> {
    return new JobTable<T>(null, 1, 0);
  }

  /** A table of the given jobs, by their ids (a later job of the same id replaces an earlier). */
  static of<T extends Keyed>(jobs: Iterable<T>): JobTable<T> {
    const draft = JobTable.empty<T>().draft();
    for (const job of jobs) draft.put(job.id, job);
    return draft.seal();
  }

  /** How many jobs the table holds. */
  get size(): number {
    return this.count;
  }

  /** The job of that id, or undefined when the table has none. */
  get(id: number): T | undefined {
    jobTableCounts.reads++;
    let node: Node | null | undefined = this.root;
    if (node === null || !inRange(id, this.levels)) return undefined;
    for (let level = this.levels - 1; level > 0 && node; level--)
      node = node.slots[digit(id, level)] as Node | undefined;
    return node?.slots[digit(id, 0)] as T | undefined;
  }

  /** The job of that id, which must be in the table: its absence is a bug, and throws saying so. */
  job(id: number): T {
    const job = this.get(id);
    if (job === undefined) throw new Error(`job table: no job ${id}`);
    return job;
  }

  /** Whether the table holds a job of that id. */
  has(id: number): boolean {
    return this.get(id) !== undefined;
  }

  /** A table with `job` at `id` (added or replaced): this one is left as it was. */
  set(id: number, job: T): JobTable<T> {
    const draft = this.draft();
    draft.put(id, job);
    return draft.seal();
  }

  /** A transient builder that starts from this table, which it leaves untouched. */
  draft(): JobTableDraft<T> {
    return new JobTableDraft(this.root, this.levels, this.count);
  }

  /** The jobs in id order. */
  *[Symbol.iterator](): IterableIterator<T> {
    if (this.root) yield* walk<T>(this.root, this.levels - 1);
  }

  /** The jobs in id order, as an array. */
  values(): T[] {
    return [...this];
  }

  /** The ids of the jobs in id order. */
  ids(): number[] {
    return this.values().map((job) => job.id);
  }

  /** As JSON, the jobs by id (what a state printed in a log or a failed test shows). */
  toJSON(): Record<number, T> {
    const out: Record<number, T> = {};
    for (const job of this) out[job.id] = job;
    return out;
  }

  /**
   * The ids whose jobs differ between this table and `other` (a job in one only counts), in id
   * order. Nodes the two share are skipped whole, so two tables a few sets apart compare in time
   * proportional to those sets times the depth, not to the flow.
   */
  diff(other: JobTable<T>): number[] {
    const out: number[] = [];
    const levels = Math.max(this.levels, other.levels);
    diffNodes(lift(this.root, this.levels, levels), lift(other.root, other.levels, levels), levels - 1, 0, out);
    return out;
  }
}

/**
 * A table being built: reads see its writes (`put`), and the nodes it copied are its own to write
 * into until `seal`. Once sealed it is an ordinary immutable JobTable (the same object: a Draft
 * of a flow hands its table to the state it reaches); `put` then throws, and `set`, as on any
 * table, returns a new one.
 */
export class JobTableDraft<T extends Keyed> extends JobTable<T> {
  /** Marks the nodes this draft copied; null once sealed, so nodes sealed stay immutable. */
  private owner: object | null = {};

  /** @internal Built by `JobTable.draft`. */
  constructor(root: Node | null, levels: number, count: number) {
    super(root, levels, count);
  }

  /** Puts `job` at `id`, in place: copies the nodes on its path that are not yet this draft's own. */
  put(id: number, job: T): void {
    if (this.owner === null) throw new Error("job table: put into a sealed draft");
    if (!Number.isSafeInteger(id) || id < 0) throw new RangeError(`job table: bad job id ${id}`);
    while (!inRange(id, this.levels)) {
      if (this.root) this.root = { owner: this.owner, slots: [this.root] };
      this.levels++;
    }
    this.root = this.own(this.root);
    let node = this.root;
    for (let level = this.levels - 1; level > 0; level--) {
      const at = digit(id, level);
      const child = this.own(node.slots[at] as Node | undefined);
      node.slots[at] = child;
      node = child;
    }
    const at = digit(id, 0);
    if (node.slots[at] === undefined) this.count++;
    node.slots[at] = job;
  }

  /** Ends the draft: the table is immutable from now on, and returned as such. */
  seal(): JobTable<T> {
    this.owner = null;
    return this;
  }

  /** The node itself when this draft copied it already, else its copy (or a new empty node). */
  private own(node: Node | null | undefined): Node {
    if (node && node.owner !== null && node.owner === this.owner) return node;
    jobTableCounts.copies++;
    return { owner: this.owner, slots: node ? node.slots.slice() : [] };
  }
}

/**
 * What tables have done since the process began: jobs read (`get`) and trie nodes copied (each
 * at most 32 slots). Only for tests that count a transition's work, and for benchmarks; reset by
 * assigning 0.
 */
export const jobTableCounts = { reads: 0, copies: 0 };

/** A trie node: 32 slots of children (or, at the bottom level, of jobs); `owner` is the draft that may write into it. */
interface Node {
  owner: object | null;
  slots: (Node | Keyed | undefined)[];
}

const POW32 = Array.from({ length: 12 }, (_, level) => 32 ** level);

/** The id's digit at a level (base 32): which slot of a node on its path holds it. */
function digit(id: number, level: number): number {
  // A division by a power of two is exact, and `& 31` truncates and keeps the low five bits,
  // right for any safe integer (ToInt32 keeps the low 32 bits of the truncated quotient).
  return (id / (POW32[level] as number)) & 31;
}

/** Whether a trie of that many levels has room for the id. */
function inRange(id: number, levels: number): boolean {
  return id >= 0 && id < (POW32[levels] as number);
}

/** The jobs under a node, in id order. */
function* walk<T>(node: Node, level: number): Generator<T> {
  for (const slot of node.slots) {
    if (slot === undefined) continue;
    if (level === 0) yield slot as T;
    else yield* walk(slot as Node, level - 1);
  }
}

/** A root seen as the root of a taller trie: the extra levels hold it in their slot 0. */
function lift(root: Node | null, levels: number, to: number): Node | null {
  let node = root;
  for (let at = levels; at < to && node; at++) node = { owner: null, slots: [node] };
  return node;
}

/** Collects into `out` the ids under two nodes of the same place whose jobs differ. */
function diffNodes(
  a: Node | null | undefined,
  b: Node | null | undefined,
  level: number,
  base: number,
  out: number[],
): void {
  if (a === b) return;
  const span = POW32[level] as number;
  for (let i = 0; i < 32; i++) {
    const x = a?.slots[i];
    const y = b?.slots[i];
    if (x === y) continue;
    if (level === 0) out.push(base + i);
    else diffNodes(x as Node | undefined, y as Node | undefined, level - 1, base + i * span, out);
  }
}
