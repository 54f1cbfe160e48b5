import type { DeadlineOwner } from "../../shared/keys.js";
import type { EffectiveRetention, Runner } from "../../shared/model/index.js";
import type { ContextLook, Store, SweepPolicy } from "../../shared/store/index.js";
import { readConfig } from "../core/config.js";
import { deleteContextStep, DELETION_STEP_MS } from "../upkeep/context-deletion.js";
import type { Env } from "../core/env.js";
import { unwrap } from "../core/problem.js";
import { parseRetention, retentionInForce, retentionStep } from "../upkeep/retention.js";
import { scopeFor, type DispatchScope } from "../core/scopes.js";
import { coordinatorStub } from "../core/stubs.js";
import type { Wanted } from "./rounds-host.js";

/** Due flows one look returns, pokes at once, and looks (pages) per sweep: at most 1,000 flows. */
const FLOWS_PER_LOOK = 100;
const POKES_AT_ONCE = 20;
const LOOKS_PER_SWEEP = 10;
/** A claim not delivered for this long is reaped (the rounds' REAP_AFTER_MS). */
const STALE_CLAIM_MS = 30_000;
/** Figure records a context may gather before its sweep folds them (a scrape folds them too). */
const FOLD_AT = 100;
/** Where the Dispatcher keeps the context's own `retention` field as last read (null: none). */
const RETENTION_KEY = "retention";

/** What a context's sweep uses of its Dispatcher. */
export interface SweepHost {
  readonly env: Env;
  readonly storage: DurableObjectStorage;
  scope(): DispatchScope;
  store(): Store;
  /** The runners as last loaded, however long ago; undefined when no list is kept. */
  knownRunners(): Promise<Runner[] | undefined>;
  /** Whether any flow's queue waits in the ring. */
  ringWaits(): Promise<boolean>;
  /** Forgets the runner list (a runner may have changed): the next round loads it. */
  dropRunners(): Promise<void>;
  /** Forgets the Dispatcher's storage and alarm (the context's deletion is done with it). */
  purge(): Promise<void>;
}

/** What a sweep leaves to the Dispatcher's rounds; `deleted` when nothing of the context is left. */
export type SweepOutcome =
  | { deleted: true }
  | {
      deleted: false;
      wanted: Wanted;
      /** Every slot set the object knows was looked at: the oldest claim not delivered (if any). */
      claims?: { oldest?: number };
      firstInFlight?: number;
    };

/**
 * One context's sweep, run by its Dispatcher (docs/architecture.md, "The sweep"): one look at
 * everything the context has for it, a poke of each flow whose check time passed (its object acts
 * on its deadlines), a bounded step of retention or of the deletion when due, and the settle that
 * sets when the context is next due from its keys as they are then. A quiet context costs the
 * look and the settle: two commands. Throws when storage is away (the alarm runs it again).
 */
export async function sweepContext(host: SweepHost, now: number): Promise<SweepOutcome> {
  const store = host.store();
  const scope = host.scope();
  const known = await host.knownRunners();
  const { look, policy, inForce } = await lookWithPolicy(host, now, known);
  if (look.deletingSince !== undefined) {
    // A deletion under way goes on, a bounded step at a time, until nothing of the context is left.
    const done = await deleteContextStep(host.env, store, scope, scope.contextId, Date.now() + DELETION_STEP_MS, () =>
      host.purge(),
    );
    if (done) {
      await store.sweep.countSettled().catch(() => undefined); // nothing left of the context to settle
      return { deleted: true };
    }
    await store.sweep.settle(scope.contextId, Date.now(), policy, { more: true, poked: 0, failed: 0 });
    return { deleted: false, wanted: {} };
  }
  const pokes = await pokeDue(host, look, now, known, policy);
  let more = false;
  if (look.retentionAt !== undefined && look.retentionAt <= now) {
    const step = await retentionStep(host.env, store, scope, scope.contextId, inForce, now);
    pokes.failed += step.failed;
    more = step.more;
    if (step.removed + step.expired > 0)
      console.log(`sweep: context ${scope.contextId}: removed=${step.removed} expired=${step.expired}`);
  }
  if (look.figures >= FOLD_AT) await store.metrics.fold(scope.contextId).catch(() => undefined);
  // A wake owed is carried out before the settle takes it away: the list dropped now, the rounds
  // after (should the object die first, its alarm runs them all).
  const wakeOwed = look.wakeOwed !== undefined;
  if (wakeOwed) await host.dropRunners();
  const end = { more, poked: pokes.poked, failed: pokes.failed };
  await store.sweep.settle(scope.contextId, Date.now(), policy, { ...end, ...owed(look) });
  const stale = look.oldestClaim !== undefined && look.oldestClaim <= now - STALE_CLAIM_MS;
  return {
    deleted: false,
    wanted: {
      work: wakeOwed || (await host.ringWaits()),
      mail: wakeOwed || look.waitingMail > 0 || (look.firstInFlight ?? Infinity) <= now,
      // Without a runner list the slot sets were not looked at: the reap reads them.
      reap: wakeOwed || stale || known === undefined,
    },
    ...(known ? { claims: look.oldestClaim === undefined ? {} : { oldest: look.oldestClaim } } : {}),
    ...(look.firstInFlight === undefined ? {} : { firstInFlight: look.firstInFlight }),
  };
}

/**
 * The look, with the windows of the context's retention: those of the `retention` field last
 * read (kept in the object's storage), read again when the look finds the field changed.
 */
async function lookWithPolicy(
  host: SweepHost,
  now: number,
  known: Runner[] | undefined,
): Promise<{ look: ContextLook; policy: SweepPolicy; inForce: EffectiveRetention }> {
  const { storage } = host;
  const store = host.store();
  const scope = host.scope();
  const runnerIds = (known ?? []).map((r) => r.id);
  let raw = (await storage.get<string | null>(RETENTION_KEY)) ?? null;
  for (;;) {
    const inForce = retentionInForce(readConfig(host.env), parseRetention(raw ?? undefined));
    const policy: SweepPolicy = {
      raw,
      finishedMs: inForce.finished_seconds * 1000,
      errorMs: inForce.error_seconds * 1000,
      inboxMs: inForce.inbox_seconds * 1000,
    };
    const look = await store.sweep.look(scope.contextId, now, policy, runnerIds, FLOWS_PER_LOOK);
    if (look.held) return { look, policy, inForce };
    raw = look.retention;
    await storage.put(RETENTION_KEY, raw);
  }
}

/**
 * Pokes each flow (or job outside flows) whose check time passed, POKES_AT_ONCE at a time: its
 * object settles what it left pending, acts on its deadlines and sets its next check time. A full
 * page is followed by another look, up to LOOKS_PER_SWEEP; one that cannot be reached stays due
 * (the context comes back within a second's due time, at the next cron run).
 */
async function pokeDue(
  host: SweepHost,
  first: ContextLook,
  now: number,
  known: Runner[] | undefined,
  policy: SweepPolicy,
): Promise<{ poked: number; failed: number }> {
  const counts = { poked: 0, failed: 0 };
  const runnerIds = (known ?? []).map((r) => r.id);
  for (let page = first.due, looks = 1; page.length > 0;) {
    const failedBefore = counts.failed;
    for (let i = 0; i < page.length; i += POKES_AT_ONCE)
      await Promise.all(page.slice(i, i + POKES_AT_ONCE).map((owner) => poke(host, owner, counts)));
    if (page.length < FLOWS_PER_LOOK || counts.failed > failedBefore || looks >= LOOKS_PER_SWEEP) break;
    page = (await host.store().sweep.look(host.scope().contextId, now, policy, runnerIds, FLOWS_PER_LOOK)).due;
    looks++;
  }
  return counts;
}

/** Pokes one flow's object (FlowCoordinator.tick); a failure is counted and logged, not thrown. */
async function poke(host: SweepHost, owner: DeadlineOwner, counts: { poked: number; failed: number }): Promise<void> {
  const flowScope = scopeFor(host.scope(), host.scope().contextId, owner);
  try {
    unwrap(await coordinatorStub(host.env, flowScope).tick(flowScope));
    counts.poked++;
  } catch (error) {
    counts.failed++;
    const what = flowScope.job ? `job ${flowScope.job.id}` : `flow ${flowScope.flowId}`;
    console.warn(`sweep: context ${host.scope().contextId}, ${what}: ${(error as Error).message}`);
  }
}

/** The wake owed that the sweep carries out, for the settle to take away. */
function owed(look: ContextLook): { wakeOwed?: string } {
  return look.wakeOwed === undefined ? {} : { wakeOwed: look.wakeOwed };
}
