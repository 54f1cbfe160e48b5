import type { Store, WorkSettlement } from "../../shared/store/index.js";

const SETTLE_TRIES = 3;

/**
 * Writes how a dispatcher's claims ended (settleWork), retrying a storage hiccup a few times. If
 * storage stays away, the settlement is kept (memory only) and written with the next round's; an
 * instance that dies first leaves its claims unsettled in Redis, and the reaper asks their owners
 * again.
 */
export class Settlements {
  private owed: WorkSettlement = { delivered: [], gone: [], back: [] };

  constructor(private readonly contextId: () => number) {}

  /** Writes `settlement`; rejects once storage failed every try (it is then kept as owed). */
  async write(store: Store, settlement: WorkSettlement): Promise<void> {
    for (let attempt = 1; ; attempt++) {
      try {
        await store.dispatch.settle(this.contextId(), settlement);
        return;
      } catch (error) {
        if (attempt >= SETTLE_TRIES) {
          this.owed = {
            delivered: [...this.owed.delivered, ...settlement.delivered],
            gone: [...this.owed.gone, ...settlement.gone],
            back: [...this.owed.back, ...settlement.back],
          };
          throw error;
        }
        await new Promise((r) => setTimeout(r, 200 * 2 ** attempt));
      }
    }
  }

  /** Takes what earlier rounds could not write, if anything (the caller writes it). */
  takeOwed(): WorkSettlement | undefined {
    const owed = this.owed;
    if (owed.delivered.length + owed.gone.length + owed.back.length === 0) return undefined;
    this.owed = { delivered: [], gone: [], back: [] };
    return owed;
  }
}
