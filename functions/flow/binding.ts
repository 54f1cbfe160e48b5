import type { RecordToken } from "../../shared/store/index.js";
import type { FlowScope } from "../core/scopes.js";

/** Where the object keeps what it coordinates, and the incarnation of the flow its storage belongs to. */
const SCOPE = "scope";
const INCARNATION = "incarnation";

/**
 * What the record read from Redis says of the object's storage: `own` (it belongs to this
 * record, or nothing tells otherwise), or `foreign` (it belongs to another incarnation of the
 * flow, or to one that is gone: wipe it).
 */
export type Verdict = "own" | "foreign";

/**
 * A FlowCoordinator's binding: the scope it serves and the incarnation token of the flow its
 * storage belongs to, kept together in its storage once the flow exists (so an alarm that wakes a
 * fresh instance knows where to look, and whose journal it holds).
 *
 * A flow's id can name another flow later: Redis flushed or replaced, or the flow deleted and
 * its id given again. Each flow (and each job run outside any flow) is created with a random
 * token of its own, kept in its record (`_op`) and here; whenever the object reads its record,
 * `judge` tells whether its storage (journal, pending plan, stream, nonces, feed cursor) is that
 * record's. A record without a token is no flow this coordinator created (a partial hash a write
 * left after Redis was wiped): never this storage's. Storage without one (just wiped) takes the
 * record's.
 */
export class FlowBinding {
  private scope: FlowScope | undefined;
  /** Whether the scope is in storage (with the token, when known). */
  private kept = false;
  /** The incarnation storage belongs to; undefined while none is known. */
  private token: string | undefined;
  /** Creations under way: while one runs, a record not there yet is expected. */
  private creations = 0;
  private reading: Promise<void> | undefined;

  constructor(private readonly storage: DurableObjectStorage) {}

  /** Takes the stored scope, else the caller's: stored only once the flow exists (`keep`). */
  async bind(scope: FlowScope): Promise<void> {
    await this.read();
    this.scope ??= scope;
  }

  /** The stored scope, if any (an alarm that woke a fresh instance). */
  async restore(): Promise<FlowScope | undefined> {
    await this.read();
    return this.scope;
  }

  private read(): Promise<void> {
    this.reading ??= (async () => {
      const got = await this.storage.get<unknown>([SCOPE, INCARNATION]);
      const stored = got.get(SCOPE) as FlowScope | undefined;
      if (stored) {
        this.scope ??= stored;
        this.kept = true;
      }
      this.token ??= got.get(INCARNATION) as string | undefined;
    })();
    return this.reading;
  }

  /** The scope; throws before one is bound. */
  get bound(): FlowScope {
    if (!this.scope) throw new Error("the FlowCoordinator was used before it was bound to a scope");
    return this.scope;
  }

  /** The incarnation this object's storage belongs to, when known (what the context's feed is told). */
  get incarnation(): string | undefined {
    return this.token;
  }

  /** Whether the scope is in storage: the object has served a flow that existed. */
  get hasHistory(): boolean {
    return this.kept;
  }

  /** Stores the scope (and the token) unless it is there. */
  async keep(): Promise<void> {
    if (this.kept || !this.scope) return;
    await this.storage.put({ [SCOPE]: this.scope, ...(this.token !== undefined ? { [INCARNATION]: this.token } : {}) });
    this.kept = true;
  }

  /**
   * Runs a creation with `token` as its flow's incarnation, kept with the scope before anything
   * of the flow is written. While it runs, a record not there yet is expected (`judge`).
   */
  async creating<T>(token: string, work: () => Promise<T>): Promise<T> {
    this.creations++;
    try {
      this.token = token;
      this.kept = false;
      await this.keep();
      return await work();
    } finally {
      this.creations--;
    }
  }

  /**
   * Judges the record read from Redis against this storage, and takes the record's token when
   * storage has none. A record that is gone makes storage foreign only if it holds anything
   * (and no creation is under way).
   */
  async judge(record: RecordToken): Promise<Verdict> {
    await this.read();
    if (record === null) return this.kept && this.creations === 0 ? "foreign" : "own";
    if (record.token === undefined) return "foreign";
    if (record.token === this.token) return "own";
    if (this.token !== undefined) return "foreign";
    await this.adopt(record.token);
    return "own";
  }

  /** Storage was wiped: nothing of it is kept (the scope stays in memory). */
  wiped(): void {
    this.kept = false;
    this.token = undefined;
  }

  /** Takes `token` as the incarnation storage belongs to (after a wipe: the record's). */
  async adopt(token: string): Promise<void> {
    this.token = token;
    if (this.kept) await this.storage.put(INCARNATION, token);
  }
}
