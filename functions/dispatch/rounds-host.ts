import type { Runner } from "../../shared/model/index.js";
import type { Store } from "../../shared/store/index.js";
import type { DeliverAnswer, Wake } from "../core/contracts.js";
import type { CoordinatorKey } from "../core/coordinator-key.js";
import type { RunnerBackoff } from "./backoff.js";
import type { ReadyRing } from "./ring.js";

/** What a round asks for: dispatch work, relay mail, reap abandoned claims. */
export type Wanted = Pick<Wake, "work" | "mail" | "reap">;

/** What the rounds need from the Dispatcher around them. */
export interface RoundsHost {
  readonly backoff: RunnerBackoff;
  readonly ring: ReadyRing;
  store(): Store;
  contextId(): number;
  /** The context's runners (cached for a moment). */
  runners(): Promise<Runner[]>;
  signingKey(): Promise<CoordinatorKey>;
  /**
   * Asks the owners of work items to deliver them to `runner` (askOwners), answering in their
   * order; an Error where the owner could not be asked.
   */
  askOwners(items: string[], runner: Runner): Promise<(DeliverAnswer | Error)[]>;
  /**
   * No round runs any more: set the alarm (to a backoff's end, soon after a failed round, or when
   * unsettled claims may be reaped).
   */
  rested(retrySoon: boolean, reapAt: number | undefined): Promise<void>;
}
