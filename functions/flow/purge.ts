import type { PurgeOutcome, Store } from "../../shared/store/index.js";
import type { Env } from "../core/env.js";
import type { FlowScope } from "../core/scopes.js";
import { forgetInFeed } from "./feed-relay.js";
import type { GroupCommit } from "./group-commit.js";
import type { Incarnations } from "./incarnation.js";
import { purgeRecords } from "./purge-records.js";

/*
 * Removing a flow (or a job outside any flow) for good: retention once its window passed, an
 * admin's DELETE, or its context's deletion. Its object does it, since it alone knows every
 * message its jobs used, and its own storage must go too.
 */

/** What removing a flow needs of its object. */
export interface Purging {
  commits: Pick<GroupCommit, "load" | "quiet" | "current" | "forget">;
  incarnations: Pick<Incarnations, "wipe">;
  env: Env;
  scope: FlowScope;
  store: Store;
}

/**
 * Removes the flow for good, in Redis (purgeRecords) and in its object (storage and memory), once
 * every commit queued so far is written and with nothing committed meanwhile; the caller keeps
 * other calls out (blockConcurrencyWhile).
 */
export async function purgeFlow(p: Purging, force: boolean): Promise<PurgeOutcome> {
  // A flow whose records cannot be read is still removed when its context goes.
  await p.commits.load().catch((error: unknown) => {
    if (!force) throw error;
  });
  const outcome = await p.commits.quiet(() => purgeRecords(p.store, p.scope, p.commits.current ?? undefined, force));
  if (typeof outcome === "object") return outcome;
  // A fresh start: nothing of the flow is left in storage, nor in memory.
  await p.incarnations.wipe("the flow was purged");
  p.commits.forget();
  await forgetInFeed(p.env, p.scope);
  return outcome;
}
