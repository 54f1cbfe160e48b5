import type { Context, EffectiveRetention, RetentionPolicy } from "../../shared/model/index.js";
import type { Store } from "../../shared/store/index.js";
import type { Config } from "./config.js";
import type { Env } from "./env.js";
import { unwrap } from "./problem.js";
import { scopeFor, type ScopeBase } from "./scopes.js";
import { coordinatorStub } from "./stubs.js";

/** Most flows (and jobs outside flows) one sweep removes per context and status, and unread messages. */
export const PURGE_PER_SWEEP = 200;

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
export function parseRetention(raw: string | null | undefined): RetentionPolicy | undefined {
  if (!raw) return undefined;
  try {
    return JSON.parse(raw) as RetentionPolicy;
  } catch {
    return undefined;
  }
}

/** What one retention step did in a context. */
export interface RetentionReport {
  removed: number;
  expired: number;
  /** Flows that could not be removed this time (their object unreachable, or they run again). */
  failed: number;
  /** More is due than one step removes: come back soon. */
  more: boolean;
}

/**
 * One bounded retention step in a context: ended flows (and jobs outside flows) whose window
 * passed are removed by their own objects (each checks it still ended, removes its records and
 * index entries in Redis, then its own storage), and unread inbox messages past the inbox window
 * go. Cost: one read per status, one call and one script per flow, one script per 200 messages.
 */
export async function retentionStep(
  env: Env,
  store: Store,
  base: ScopeBase,
  contextId: number,
  policy: EffectiveRetention,
  now: number,
): Promise<RetentionReport> {
  const report: RetentionReport = { removed: 0, expired: 0, failed: 0, more: false };
  for (const status of ["finished", "error"] as const) {
    const keep = (status === "finished" ? policy.finished_seconds : policy.error_seconds) * 1000;
    const due = await store.retention.endedBefore(contextId, status, now - keep, PURGE_PER_SWEEP);
    if (due.length === PURGE_PER_SWEEP) report.more = true;
    for (const owner of due) {
      const scope = scopeFor(base, contextId, owner);
      try {
        const outcome = unwrap(await coordinatorStub(env, scope).purge(scope));
        if (outcome === "removed" || outcome === "gone") report.removed++;
        else report.failed++;
      } catch (error) {
        report.failed++;
        console.warn(`retention: context ${contextId}, ${JSON.stringify(owner)}: ${(error as Error).message}`);
      }
    }
  }
  report.expired = await store.messages.expireUnread(contextId, now - policy.inbox_seconds * 1000, PURGE_PER_SWEEP);
  if (report.expired === PURGE_PER_SWEEP) report.more = true;
  return report;
}

/** Whether a context is being deleted (its record says so). */
export function isDeleting(context: Pick<Context, "deleting_since">): boolean {
  return context.deleting_since !== undefined;
}
