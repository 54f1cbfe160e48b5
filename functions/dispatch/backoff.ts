import type { RunnerHealth, Store } from "../../shared/store/index.js";

const FIRST_RETRY_MS = 1_000;
const MAX_RETRY_MS = 30_000;

/** What the backoff needs of its Dispatcher (DispatchObject implements it). */
export interface BackoffHost {
  store(): Store;
  contextId(): number;
}

/**
 * Runners whose deliveries fail are left alone for a while: 1 s after the first failure, doubling
 * to 30 s (with jitter), and tried again after that; the first delivery they take ends it. Kept in
 * the dispatcher's storage, so an evicted dispatcher still knows when to try again, and mirrored
 * to Redis (only when it changes) for operators (`GET …/runners/{r}`).
 */
export class RunnerBackoff {
  private byRunner: Map<number, RunnerHealth> | undefined;

  constructor(
    private readonly storage: DurableObjectStorage,
    private readonly host: BackoffHost,
  ) {}

  private async all(): Promise<Map<number, RunnerHealth>> {
    this.byRunner ??= new Map(
      Object.entries((await this.storage.get<Record<string, RunnerHealth>>("backoff")) ?? {}).map(([k, v]) => [
        Number(k),
        v,
      ]),
    );
    return this.byRunner;
  }

  private async save(): Promise<void> {
    await this.storage.put("backoff", Object.fromEntries(await this.all()));
  }

  /** Runners not to be tried before some time after now, with what went wrong. */
  async waiting(now = Date.now()): Promise<Map<number, RunnerHealth>> {
    const out = new Map<number, RunnerHealth>();
    for (const [id, h] of await this.all()) if (h.retry_at > now) out.set(id, h);
    return out;
  }

  /** A delivery to the runner failed: leave it alone for a while. */
  async failed(runner: number, reason: string, now = Date.now()): Promise<void> {
    const all = await this.all();
    const failures = (all.get(runner)?.failures ?? 0) + 1;
    const ceiling = Math.min(MAX_RETRY_MS, FIRST_RETRY_MS * 2 ** (failures - 1));
    const health: RunnerHealth = {
      last_error: reason,
      last_error_at: now,
      failures,
      retry_at: now + Math.round(ceiling * (0.5 + Math.random() / 2)),
    };
    all.set(runner, health);
    await this.save();
    await this.host
      .store()
      .dispatch.setHealth(this.host.contextId(), runner, health)
      .catch(() => undefined);
  }

  /** The runner took a delivery: whatever was wrong is over. */
  async succeeded(runner: number): Promise<void> {
    const all = await this.all();
    if (!all.has(runner)) return;
    all.delete(runner);
    await this.save();
    await this.host
      .store()
      .dispatch.setHealth(this.host.contextId(), runner, null)
      .catch(() => undefined);
  }

  /** Forgets runners that no longer exist. */
  async keepOnly(ids: Set<number>): Promise<void> {
    const all = await this.all();
    const gone = [...all.keys()].filter((id) => !ids.has(id));
    if (gone.length === 0) return;
    for (const id of gone) all.delete(id);
    await this.save();
  }
}
