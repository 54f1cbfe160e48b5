import type { DagJob, FlowEvent, FlowTimeouts, JobState, Transition } from "../../shared/flow/index.js";
import type {
  DeliveryPayload,
  FlowStreamEvent,
  FlowOrigin,
  FlowIdentity,
  FlowParent,
  FlowProgress,
  FlowView,
  JobWaiting,
  Log,
  ScheduleRun,
  ScriptType,
} from "../../shared/model/index.js";
import type { Claim, PurgeOutcome, PushRunnerName, ReadyQueue } from "../../shared/store/index.js";
import type { RpcResult } from "./problem.js";
import type { DispatchScope, FlowScope } from "./scopes.js";

/*
 * The RPC surfaces of the Durable Objects, declared here, below both, so that the Worker's
 * routes, the supervisor and each object can call the other through a typed stub without
 * importing its class (the layers of functions/ never point upwards). The classes implement
 * these interfaces; a change of signature shows up on both sides.
 */

/**
 * What a re-run asks, as the API takes it (docs/flows.md, "Re-runs"): the job to re-run from
 * (its id, or its name), env variables to set from this run on, and the run it replaces.
 */
export interface RerunInput {
  from?: number | string | undefined;
  env?: Record<string, string> | undefined;
  run?: number | undefined;
}

/** What `create` needs: the resolved DAG and the ids reserved for it. */
export interface CreateFlowInput {
  callerId: number;
  jobs: DagJob[];
  envVars: Record<string, string>;
  timeouts: FlowTimeouts;
  traceId: string;
  /** Where the flow's ready jobs stand (higher first) and its cap on attempts in flight. */
  priority?: number | undefined;
  maxParallel?: number | undefined;
  /**
   * Whether the caller has an https address to POST the flow's result to (FlowState.notifyHttps);
   * unset means unknown, which counts as yes.
   */
  notifyHttps?: boolean | undefined;
  /** The template and version the flow is started from, kept on its record (docs/templates.md). */
  template?: FlowOrigin | undefined;
  /** The job that starts the flow, for a child flow (docs/flows.md, "Child flows"). */
  parent?: FlowParent | undefined;
  /** Its name, labels and the schedule that starts it, kept on its record. */
  identity?: FlowIdentity | undefined;
  messageBase: number;
  /** Positions of jobs whose ids the caller chose (only those can collide). */
  chosen: number[];
  start: boolean;
  /**
   * The push runners the context's dispatcher named (read with the reservation): candidates for
   * the claims of the flow's commits while its object's isolate knows none of its own.
   */
  pushRunners?: PushRunnerName[] | undefined;
}

/** How a runner's event was taken. */
export interface EventAnswer {
  outcome: Transition["outcome"] | "replayed";
  reason?: string;
  status?: JobState["status"];
  /** The coordinator origin this flow's runners call back (from the request that created it). */
  origin?: string;
}

/** What a runner's report brings besides its event: the signature's nonce, and log lines. */
export interface EventExtras {
  nonce?: { keyid: string; value: string; ttlMs: number };
  logs?: Log[];
}

/** One event of `handleMany`, with what its report brought. */
export interface ReportedEvent {
  event: FlowEvent;
  extras?: EventExtras;
}

/** A runner a work item was claimed for, as its delivery needs it. */
export interface DeliveryTarget {
  id: number;
  /** The push address; "" for a pull runner, whose lease answers with the delivery. */
  address: string;
  /** How many deliveries one POST to it may carry (its `deliveries_per_post`). */
  perPost: number;
  /** Its public key (`pubkey`): an answer that reports how an attempt ended is signed with it. */
  pubkey: string;
  /** The script types it runs (the dispatcher tells them): what the flow's own claims may offer it. */
  scriptTypes?: readonly ScriptType[];
}

/** How the owner of an attempt took a delivery the dispatcher (or a lease) asked it to make. */
export type DeliverAnswer =
  /** The runner has it (a push answered 2xx), or the lease may hand out `payload`. */
  | { outcome: "delivered"; payload?: DeliveryPayload }
  /**
   * The runner did not take it: `reason` says how it answered. The attempt waits for a runner
   * again, at the front of `queue`.
   */
  | { outcome: "refused"; reason: string; queue: ReadyQueue }
  /** The attempt no longer wants a runner (it ended, moved on, or went to another runner). */
  | { outcome: "gone"; reason: string };

/**
 * An owner's answer for one of several attempts it was asked to deliver at once: `failed` when it
 * could not tell (its storage away, say), which the asker takes as an owner it could not ask.
 */
export type OwnerAnswer = DeliverAnswer | { outcome: "failed"; reason: string };

/** The FlowCoordinator's RPC methods (one object per flow, or per job outside any flow). */
export interface FlowCoordinatorRpc extends Rpc.DurableObjectBranded {
  /** Creates the flow (idempotent: an existing flow is returned as it is) and maybe starts it. */
  create(scope: FlowScope, input: CreateFlowInput): Promise<RpcResult<FlowView>>;
  /** Starts the flow; starting a started flow changes nothing. */
  start(scope: FlowScope): Promise<RpcResult<FlowView>>;
  /**
   * Cancels the flow; one that ended already (a repeated cancel too) is a 409 naming its status,
   * nothing written. With `compensate`, a flow with compensations unwinds (a repeat finds it
   * unwinding: answered with the flow).
   */
  cancel(scope: FlowScope, reason: string, compensate?: boolean): Promise<RpcResult<FlowView>>;
  /**
   * Runs the flow again: a failed one from its failed jobs (one whose unwinding failed from its
   * failed compensations), or one that ended from a job (`from`), with env overrides; refused
   * (409) when it is not at the run `run` names.
   */
  rerun(scope: FlowScope, input?: RerunInput): Promise<RpcResult<FlowView>>;
  /** The flow with every job's live status; null when there is no such flow. */
  view(scope: FlowScope, options?: { explain?: boolean }): Promise<RpcResult<FlowView | null>>;
  /** How many of the flow's jobs are in each status (a list's live progress); null when there is no such flow. */
  progress(scope: FlowScope): Promise<RpcResult<FlowProgress | null>>;
  /** Applies a runner's event; resolves once the transition is durable. */
  handle(scope: FlowScope, event: FlowEvent, extras?: EventExtras): Promise<RpcResult<EventAnswer>>;
  /**
   * Applies several runner events in one call, each as `handle` would, answered in order; events
   * of one job are applied in their order, different jobs' together (one group commit).
   */
  handleMany(scope: FlowScope, events: ReportedEvent[]): Promise<RpcResult<RpcResult<EventAnswer>[]>>;
  /**
   * Delivers claimed attempts of this flow (work items) to the runner their slots were claimed
   * at, all at once: one call however many of its attempts a round or a lease claimed.
   */
  deliver(scope: FlowScope, items: string[], runner: DeliveryTarget): Promise<RpcResult<OwnerAnswer[]>>;
  /**
   * Offers an event to one of the flow's waits (the context's index of waits named it): the wait
   * finishes with its data, once; a repeat, or a wait that ended, changes nothing (the outcome says).
   */
  takeEvent(scope: FlowScope, event: Extract<FlowEvent, { type: "event" }>): Promise<RpcResult<EventAnswer>>;
  /** A child flow of one of the flow's jobs ended (told by the child's object): the job ends with it, once. */
  childEnded(scope: FlowScope, event: Extract<FlowEvent, { type: "childEnded" }>): Promise<RpcResult<EventAnswer>>;
  /** The supervisor's poke: settle what is pending, act on due deadlines. */
  tick(scope: FlowScope): Promise<RpcResult<null>>;
  /** Tells the flow's stream that dispatch in its context was paused or resumed (once per change). */
  announce(scope: FlowScope, type: "flow.paused" | "flow.resumed", reason: string): Promise<RpcResult<null>>;
  /**
   * Removes the flow (or job) with all it owns, in Redis and in the object's own storage: only
   * once it ended (else `{running: status}`, nothing removed), or with `force` whatever it is
   * doing (its context is being deleted). Its children go first, each with its own (not with
   * `force`); `expiring` (retention) keeps a child whose parent is still there (`{kept: parent}`);
   * `parent` removes only a flow that is that parent's child. Idempotent: a flow removed before is `gone`.
   */
  purge(
    scope: FlowScope,
    options?: { force?: boolean; expiring?: boolean; parent?: number },
  ): Promise<RpcResult<PurgeOutcome>>;
}

/**
 * Why a dispatcher is woken: attempts were queued (`queues`: in which flows' queues; `work`: look
 * at every queue it knows), runners' slots were freed (`freed`: which runners; `released`: the
 * work items whose slots those were, whose delivery need not be marked any more), messages for
 * actors were posted (`mail`), the context's runners or limits changed (`runners`), or claims
 * that may have been abandoned should be looked at (`reap`, by the supervisor's sweep).
 */
export interface Wake {
  queues?: ReadyQueue[];
  work?: boolean;
  freed?: number[];
  released?: string[];
  mail?: boolean;
  runners?: boolean;
  reap?: boolean;
}

/** Most items a wake names as released. */
const MOST_RELEASED = 1_000;

/** One wake that says all two wakes said (a queue named twice, the later naming). */
export function mergeWakes(a: Wake | undefined, b: Wake | undefined): Wake {
  const freed = [...new Set([...(a?.freed ?? []), ...(b?.freed ?? [])])];
  // Only spares the dispatcher a mark (see DeliveredClaims), so a wake owed for long keeps the
  // latest few: it is stored whole with the flow's object.
  const released = [...new Set([...(a?.released ?? []), ...(b?.released ?? [])])].slice(-MOST_RELEASED);
  const queues = new Map([...(a?.queues ?? []), ...(b?.queues ?? [])].map((q) => [q.key, q]));
  const flag = (k: "work" | "mail" | "runners" | "reap") => (a?.[k] || b?.[k] ? { [k]: true } : {});
  return {
    ...flag("work"),
    ...flag("mail"),
    ...flag("runners"),
    ...flag("reap"),
    ...(freed.length > 0 ? { freed } : {}),
    ...(released.length > 0 ? { released } : {}),
    ...(queues.size > 0 ? { queues: [...queues.values()] } : {}),
  };
}

/** An attempt waiting for a runner: of a script type, or pinned to one runner. */
export interface Want {
  scriptType: ScriptType;
  runnerId?: number;
}

/** Why an attempt is not with a runner yet, in words and as a code (`until`: epoch ms). */
export interface WaitReason {
  /** The reasons only dispatch can tell (the flow itself tells dependencies, backoff, delivering). */
  reason: Exclude<JobWaiting["reason"], "dependencies" | "backoff" | "delivering">;
  detail: string;
  until?: number;
}

/** The Dispatcher's RPC methods (one object per context). */
export interface DispatcherRpc extends Rpc.DurableObjectBranded {
  /** Wakes the dispatcher: durable once this resolves; the round runs after it. */
  wake(scope: DispatchScope, wake: Wake): Promise<void>;
  /** Why attempts of these kinds are not with a runner yet (one reason per want). */
  explain(scope: DispatchScope, wants: Want[]): Promise<WaitReason[]>;
  /** How many job attempts wait in the context's ready queues now (read from Redis). */
  waiting(scope: DispatchScope): Promise<number>;
  /**
   * Claims up to `max` attempts for a pull runner, in the same turn order as push runners get
   * theirs; the caller has each claim's owner hand it out and settles the claims.
   */
  lease(scope: DispatchScope, runnerId: number, max: number): Promise<Claim[]>;
  /**
   * Settles attempts a flow's commit claimed for itself and its object delivered to `runnerId`,
   * where the runner did not take them (refused: back to the front of their queue, the runner
   * backed off; gone: the slot freed; failed: not known, left for the reaper), as the answers of
   * its own rounds' owners are settled. Answers are in the items' order.
   */
  settleOwn(scope: DispatchScope, runnerId: number, items: string[], answers: OwnerAnswer[]): Promise<void>;
  /**
   * Asks for the context's sweep (the cron's hand-off): durable once this resolves, run on the
   * object's alarm right after. Asking again while one waits or runs sweeps once more after it.
   */
  sweep(scope: DispatchScope): Promise<void>;
  /** Forgets the context (it is being deleted): no alarm, no storage. Idempotent. */
  purge(scope: DispatchScope): Promise<void>;
}

/**
 * The ContextFeed's RPC methods (one object per context): the context's stream, fed by its flows'
 * objects. Besides these, its `fetch` accepts subscribers' WebSockets.
 */
export interface ContextFeedRpc extends Rpc.DurableObjectBranded {
  /**
   * Takes a flow's `flow.*` events (at least once: what it has already is skipped); resolves
   * once they are journalled. `incarnation` is the flow's token: events of another incarnation
   * under the same id (Redis flushed, the id given again) start from 1 and are all taken.
   */
  publish(scope: DispatchScope, flowId: number, events: FlowStreamEvent[], incarnation?: string): Promise<void>;
  /** Forgets the context's stream (it is being deleted): subscribers closed, no storage. Idempotent. */
  purge(scope: DispatchScope): Promise<void>;
  /** Forgets a removed flow's cursor (its events already in the stream stay until they age out). */
  forget(scope: DispatchScope, flowId: number): Promise<void>;
}

/**
 * What a Scheduler object serves (one per schedule, docs/schedules.md): the deployment's key
 * prefix, the context, the schedule, and the public origin its flows' runners call back at.
 */
export interface ScheduleScope {
  prefix: string;
  contextId: number;
  scheduleId: number;
  origin: string;
}

/** What a schedule's object knows besides its record (times in epoch seconds; runs newest first). */
export interface SchedulerState {
  last_fire_at?: number;
  next_fire_at?: number;
  buffered_fire_at?: number;
  running_flow_ids: number[];
  recent_runs: ScheduleRun[];
}

/** The Scheduler's RPC methods (one object per schedule). */
export interface SchedulerRpc extends Rpc.DurableObjectBranded {
  /** Reads the schedule's record again (created, paused, resumed) and sets the alarm to match. */
  sync(scope: ScheduleScope): Promise<RpcResult<SchedulerState>>;
  /** Fires now (the fire time is this second), through the overlap policy; answers what became of it. */
  trigger(scope: ScheduleScope): Promise<RpcResult<ScheduleRun>>;
  /** What the object knows: last and next fire, a buffered fire, running flows, recent runs. */
  state(scope: ScheduleScope): Promise<RpcResult<SchedulerState>>;
  /** The sweep's backstop: acts on fires that are due, as the alarm would have. */
  poke(scope: ScheduleScope): Promise<RpcResult<null>>;
  /** Forgets the schedule: no alarm, no storage. Idempotent. */
  remove(scope: ScheduleScope): Promise<RpcResult<null>>;
}
