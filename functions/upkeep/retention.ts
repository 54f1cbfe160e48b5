import type { DeadlineOwner } from "../../shared/keys.js";
import { RetentionPolicy, type EffectiveRetention } from "../../shared/model/index.js";
import type { Store } from "../../shared/store/index.js";
import type { Config } from "../core/config.js";
import type { Env } from "../core/env.js";
import { unwrap } from "../core/problem.js";
import { scopeFor, type ScopeBase } from "../core/scopes.js";
import { coordinatorStub } from "../core/stubs.js";

/** Flows (and jobs outside flows) read and removed at once, 20 objects called together. */
const BATCH = 100;
const PARALLEL = 20;
/** How long one context's retention step may go on in a sweep, and how many flows it removes at most. */
const STEP_MS = 10_000;
const STEP_MAX = 2_000;
/** Unread messages one call removes (expireInbox). */
const INBOX_BATCH = 200;

const PARTS = ["finished_seconds", "error_seconds", "inbox_seconds", "dead_letters"] as const;

/** The retention in force in a context: its own settings over the deployment's defaults. */
export function retentionInForce(config: Config, own: RetentionPolicy | undefined): EffectiveRetention {
  const defaults = { ...config.retention, dead_letters: config.deadLettersMax };
  const overridden = PARTS.filter((part) => own?.[part] !== undefined);
  const pick = (part: (typeof PARTS)[number]) => own?.[part] ?? defaults[part];
  return {
    finished_seconds: pick("finished_seconds"),
    error_seconds: pick("error_seconds"),
    inbox_seconds: pick("inbox_seconds"),
    dead_letters: pick("dead_letters"),
    overridden,
  };
}

/** Reads a context's own retention as the sweep sees it (the raw field); an unreadable one counts as none. */
export function parseRetention(raw: string | undefined): RetentionPolicy | undefined {
  if (!raw) return undefined;
  try {
    const parsed = RetentionPolicy.safeParse(JSON.parse(raw));
    return parsed.success ? parsed.data : undefined;
  } catch {
    return undefined;
  }
}

/** What one retention step did in a context. */
export interface RetentionReport {
  removed: number;
  expired: number;
  /** Child flows left while their parents are kept (each goes with its parent). */
  kept: number;
  /** Flows that could not be removed this time (their object unreachable, or they run again). */
  failed: number;
  /** More is due than one step removes: come back soon. */
  more: boolean;
}

/**
 * One bounded retention step in a context: ended flows (and jobs outside flows) whose window
 * passed are removed by their own objects (each checks it still ended, removes its records and
 * index entries in Redis, then its own storage, its child flows first), and unread inbox
 * messages past the inbox window go. A child flow whose parent is still there is not removed on
 * its own (postponed a window: its parent's removal removes it); one whose parent is gone follows
 * the context's windows. In batches of 100 flows (20 objects at once) and 200 messages, for up to 10 s and 2,000 flows
 * a context per sweep. Cost: one read per 100, one call per flow (a read back of its records when
 * its object was evicted, and one script), one script per 200 messages.
 */
export async function retentionStep(
  env: Env,
  store: Store,
  base: ScopeBase,
  contextId: number,
  policy: EffectiveRetention,
  now: number,
): Promise<RetentionReport> {
  const report: RetentionReport = { removed: 0, expired: 0, kept: 0, failed: 0, more: false };
  const until = Date.now() + STEP_MS;
  const purge = async (owner: DeadlineOwner, status: "finished" | "error"): Promise<void> => {
    const scope = scopeFor(base, contextId, owner);
    try {
      const outcome = unwrap(await coordinatorStub(env, scope).purge(scope, { expiring: true }));
      if (outcome === "removed" || outcome === "gone") {
        report.removed++;
        return;
      }
      if ("kept" in outcome) {
        // A child whose parent is kept: its parent's removal takes it; looked at again a window on.
        report.kept++;
        await store.retention.postpone(contextId, status, owner, now).catch(() => undefined);
        return;
      }
      // Not over yet: a failed flow whose other jobs still run (a re-run took its entry out).
      console.warn(`retention: context ${contextId}, ${JSON.stringify(owner)}: ${outcome.running}, kept`);
    } catch (error) {
      console.warn(`retention: context ${contextId}, ${JSON.stringify(owner)}: ${(error as Error).message}`);
    }
    report.failed++;
    await store.retention.postpone(contextId, status, owner, now).catch(() => undefined);
  };
  for (const status of ["finished", "error"] as const) {
    const keep = (status === "finished" ? policy.finished_seconds : policy.error_seconds) * 1000;
    for (;;) {
      const failedBefore = report.failed;
      const due = await store.retention.endedBefore(contextId, status, now - keep, BATCH);
      for (let i = 0; i < due.length; i += PARALLEL)
        await Promise.all(due.slice(i, i + PARALLEL).map((owner) => purge(owner, status)));
      if (due.length < BATCH) break;
      // A batch that removed nothing (objects out of reach) is not read again in this sweep.
      if (report.failed - failedBefore === due.length || report.removed >= STEP_MAX || Date.now() > until) {
        report.more = true;
        break;
      }
    }
  }
  for (;;) {
    const expired = await store.messages.expireUnread(contextId, now - policy.inbox_seconds * 1000, INBOX_BATCH);
    report.expired += expired;
    if (expired < INBOX_BATCH) break;
    if (Date.now() > until) {
      report.more = true;
      break;
    }
  }
  return report;
}
