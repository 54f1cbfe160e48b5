import type { FlowEvent, FlowState } from "../../shared/flow/index.js";
import { parseWorkItem } from "../../shared/keys.js";
import type { ScriptType } from "../../shared/model/index.js";
import {
  NotFoundError,
  type Claimed,
  type CommitClaim,
  type CommitOutcome,
  type CommitPlan,
  type PushRunnerName,
  type ReadyQueue,
} from "../../shared/store/index.js";
import type { DeliverAnswer, DeliveryTarget, OwnerAnswer } from "../core/contracts.js";
import { keyCache } from "../core/key-cache.js";
import type { FlowScope } from "../core/scopes.js";
import { deliverAttempts, type AttemptOwner, type OutgoingMessages } from "./attempt-delivery.js";

/** Most candidate runners a claim tries (each costs the script a read of its record). */
const MOST_CANDIDATES = 4;
/** Contexts whose runners an isolate remembers at once. */
const MOST_CONTEXTS = 1_000;
/**
 * How long the alarm of a flow that claimed work waits at most, while the claim is not
 * delivered: should the object die meanwhile, its alarm wakes it to have the claim reaped.
 */
export const CLAIM_SAFETY_MS = 30_000;

/**
 * Push runners that took deliveries lately, per context, most recent first: the candidates a
 * commit's claims try. A cache per isolate and nothing more: the claim itself checks each
 * candidate against its record (still there, still a push runner of the queue's kind), a runner
 * it finds otherwise is forgotten, and so is one that refused a delivery (the context's
 * dispatcher, which backs it off, delivers to it again first).
 */
const known = new Map<string, Map<number, readonly ScriptType[]>>();

// A database wiped or replaced gives the context and runner ids again, to others: what this
// isolate learned goes at once when it finds out (each claim checks its candidates anyway).
keyCache.onReset((prefix) => {
  for (const key of known.keys()) if (key.startsWith(`${prefix}|`)) known.delete(key);
});

function contextOf(scope: Pick<FlowScope, "prefix" | "contextId">): string {
  return `${scope.prefix}|${scope.contextId}`;
}

/** A runner took (or was handed) a delivery: a candidate for the claims of its context's commits. */
export function noteRunner(scope: Pick<FlowScope, "prefix" | "contextId">, runner: DeliveryTarget): void {
  if (runner.address === "" || !runner.scriptTypes) return;
  remember(runnersOf(scope), runner.id, runner.scriptTypes);
}

/**
 * The push runners the context's dispatcher named (PushRunnerName), taken as candidates by an
 * isolate that knows none of the context's runners yet: a cold isolate's first flow need not go
 * through the dispatcher to learn them. Taken once per context; from then on, what this
 * isolate's deliveries teach it (noteRunner, forgetRunner) decides.
 */
export function noteNamedRunners(scope: Pick<FlowScope, "prefix" | "contextId">, named: readonly PushRunnerName[]) {
  if (named.length === 0 || known.has(contextOf(scope))) return;
  const runners = runnersOf(scope);
  for (const runner of [...named].reverse()) remember(runners, runner.id, runner.scriptTypes);
}

/** This isolate's candidates of the context, made empty if there were none. */
function runnersOf(scope: Pick<FlowScope, "prefix" | "contextId">): Map<number, readonly ScriptType[]> {
  const key = contextOf(scope);
  let runners = known.get(key);
  if (!runners) {
    if (known.size >= MOST_CONTEXTS) known.clear();
    runners = new Map();
    known.set(key, runners);
  }
  return runners;
}

function remember(runners: Map<number, readonly ScriptType[]>, id: number, scriptTypes: readonly ScriptType[]): void {
  runners.delete(id); // to the front: most recent first
  runners.set(id, scriptTypes);
}

/** A runner is not a candidate any more (gone, pulls, refused a delivery). */
export function forgetRunner(scope: Pick<FlowScope, "prefix" | "contextId">, id: number): void {
  known.get(contextOf(scope))?.delete(id);
}

/** The runners a claim on `queue` tries: the one it is pinned to, or those of its script type. */
function candidatesFor(scope: Pick<FlowScope, "prefix" | "contextId">, queue: ReadyQueue): number[] {
  const runners = known.get(contextOf(scope));
  if (!runners) return [];
  if (queue.runner !== undefined) return runners.has(queue.runner) ? [queue.runner] : [];
  const out: number[] = [];
  for (const [id, types] of [...runners].reverse()) {
    if (queue.scriptType !== undefined && types.includes(queue.scriptType)) out.push(id);
    if (out.length >= MOST_CANDIDATES) break;
  }
  return out;
}

/** What a flow's own claims need from its object. */
export interface OwnClaimsHost {
  scope(): FlowScope;
  owner(): AttemptOwner;
  readonly outgoing: OutgoingMessages;
  /**
   * Tells the context's dispatcher how deliveries went that the runner did not take (refused,
   * gone, or not known): it settles them as it settles its own rounds' (docs/dispatch.md).
   */
  settle(runner: DeliveryTarget, items: string[], answers: OwnerAnswer[]): Promise<void>;
  /** The dispatcher could not be told: it is owed a look at claims left unsettled. */
  owe(): Promise<void>;
  /** No claim is being delivered any more (the alarm need not come back for them). */
  delivered(): void;
}

/**
 * The work a flow's commits claim for themselves (docs/dispatch.md, "Claims in the commit"): a
 * commit that puts attempts in the flow's queues, or frees slots while its queues may still hold
 * some, asks its own script to give them to a runner with room, as the context's dispatcher
 * would, when no other flow waits; then this object delivers them at once, with no dispatcher
 * round between. Claims go to candidate runners only (`noteRunner`), and never for a flow with
 * `max_parallel` (the dispatcher counts its attempts across runners) or a job outside any flow
 * (its queue is shared).
 */
export class OwnClaims {
  /** Items this object delivered from its own claims: a commit's wake need not name them as released. */
  private readonly own = new Set<string>();
  /** This flow's queues a claim did not run empty: a commit that frees slots tries them again. */
  private readonly unclaimed = new Map<string, ReadyQueue>();
  /** Claims being delivered, by when they were made (the alarm comes back while any is). */
  private readonly delivering = new Map<number, number>();
  private next = 0;

  constructor(private readonly host: OwnClaimsHost) {}

  /** The claims a commit of `state` may make in its script call. */
  claimsFor(state: FlowState, commit: Pick<CommitPlan, "queued" | "freed">): CommitClaim[] {
    if (state.id === 0 || state.maxParallel !== undefined) return [];
    const queues = new Map(commit.queued.map((q) => [q.key, q]));
    if (commit.freed.length > 0)
      for (const [key, queue] of this.unclaimed) if (!queues.has(key)) queues.set(key, queue);
    const scope = this.host.scope();
    return [...queues.values()].flatMap((queue) => {
      const candidates = candidatesFor(scope, queue);
      return candidates.length > 0 ? [{ queue, candidates }] : [];
    });
  }

  /** The time the alarm must come by while claims are being delivered (undefined: none are). */
  safetyAt(): number | undefined {
    let first: number | undefined;
    for (const at of this.delivering.values()) first = first === undefined ? at : Math.min(first, at);
    return first === undefined ? undefined : first + CLAIM_SAFETY_MS;
  }

  /** Of the items a commit released, those the dispatcher delivered (it holds their marks back). */
  released(items: readonly string[]): string[] {
    return items.filter((item) => !this.own.delete(item));
  }

  /**
   * Delivers attempts a dispatcher's round (or a pull lease) claimed (FlowCoordinatorRpc.deliver),
   * answering for each; a runner that took work is a candidate for this flow's own claims, one
   * that refused is not.
   */
  async asked(items: readonly string[], runner: DeliveryTarget): Promise<OwnerAnswer[]> {
    const settled = await deliverAttempts(this.host.owner(), this.host.outgoing, items, runner);
    // No such flow: answered as a whole (404), and the asker frees every slot.
    const missing = settled.find((s) => s.status === "rejected" && s.reason instanceof NotFoundError);
    if (missing) throw (missing as PromiseRejectedResult).reason;
    const answers = settled.map(ownerAnswer);
    if (answers.some((a) => a.outcome === "refused")) forgetRunner(this.host.scope(), runner.id);
    else if (answers.some((a) => a.outcome === "delivered")) noteRunner(this.host.scope(), runner);
    return answers;
  }

  /** Takes in what a commit's claims did, and delivers what they claimed (not awaited: the caller goes on). */
  claimed(claims: readonly CommitClaim[], outcome: CommitOutcome): void {
    const scope = this.host.scope();
    for (const id of outcome.invalid) forgetRunner(scope, id);
    const drained = new Set(outcome.claimed.filter((c) => c.drained).map((c) => c.queue.key));
    for (const { queue } of claims) {
      if (drained.has(queue.key)) this.unclaimed.delete(queue.key);
      else this.unclaimed.set(queue.key, queue);
    }
    for (const group of outcome.claimed) {
      // Noted before the delivery: its result may be committed before the delivery is recorded.
      for (const item of group.items) this.own.add(item);
      void this.deliver(group);
    }
  }

  /** Delivers one runner's claimed items; what it did not take is settled by the dispatcher. */
  private async deliver(group: Claimed): Promise<void> {
    const id = this.next++;
    this.delivering.set(id, Date.now());
    const target: DeliveryTarget = { ...group.runner };
    try {
      const settled = await deliverAttempts(this.host.owner(), this.host.outgoing, group.items, target);
      const answers = settled.map(ownerAnswer);
      // What the runner did not take goes to the dispatcher, which may deliver it itself later.
      answers.forEach((a, i) => a.outcome !== "delivered" && this.own.delete(group.items[i] as string));
      if (answers.every((a) => a.outcome === "delivered")) return;
      if (answers.some((a) => a.outcome === "refused")) forgetRunner(this.host.scope(), target.id);
      await this.host.settle(target, group.items, answers).catch(() => this.host.owe());
    } catch (error) {
      console.warn(`flow ${this.host.scope().flowId}: delivering its own claims failed: ${(error as Error).message}`);
      await this.host.owe().catch(() => undefined);
    } finally {
      this.delivering.delete(id);
      if (this.delivering.size === 0) this.host.delivered();
    }
  }

  /** Forgets what memory held (another incarnation, or a reset). */
  forget(): void {
    this.own.clear();
    this.unclaimed.clear();
  }
}

/**
 * The assignments of work a commit claimed, for the same batch as the commit: its deliveries then
 * go out without a batch of their own (deliverAttempts finds them assigned).
 */
export function assignmentsOf(claimed: readonly Claimed[]): FlowEvent[] {
  const at = Date.now();
  return claimed.flatMap((group) =>
    group.items.flatMap((item): FlowEvent[] => {
      const work = parseWorkItem(item);
      return work ? [{ type: "assigned", job: work.jobId, attempt: work.attempt, runner: group.runner.id, at }] : [];
    }),
  );
}

/** An attempt's delivery as its owner answers for it: `failed` where it could not tell. */
function ownerAnswer(settled: PromiseSettledResult<DeliverAnswer>): OwnerAnswer {
  return settled.status === "fulfilled"
    ? settled.value
    : { outcome: "failed", reason: (settled.reason as Error).message };
}

/**
 * Whether a flow read back from storage has attempts that wait for a runner (queued, or claimed
 * and not delivered): an object that lost its memory cannot tell whether it had claimed them.
 */
export function awaitsRunners(state: FlowState): boolean {
  return state.order.some((id) => state.jobs.get(id)?.deadline?.kind === "delivery");
}
