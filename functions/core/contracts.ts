import type { DagJob, FlowEvent, FlowTimeouts, JobState, Transition } from "../../shared/flow/index.js";
import type {
  DeliveryPayload,
  FlowStreamEvent,
  FlowView,
  JobWaiting,
  Log,
  ScriptType,
} from "../../shared/model/index.js";
import type { RpcResult } from "./problem.js";
import type { DispatchScope, FlowScope } from "./scopes.js";

/*
 * The RPC surfaces of the Durable Objects, declared here, below both, so that the Worker's
 * routes, the supervisor and each object can call the other through a typed stub without
 * importing its class (the layers of functions/ never point upwards). The classes implement
 * these interfaces; a change of signature shows up on both sides.
 */

/** What `create` needs: the resolved DAG and the ids reserved for it. */
export interface CreateFlowInput {
  callerId: number;
  jobs: DagJob[];
  envVars: Record<string, string>;
  timeouts: FlowTimeouts;
  traceId: string;
  messageBase: number;
  /** Positions of jobs whose ids the caller chose (only those can collide). */
  chosen: number[];
  start: boolean;
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

/** A runner a work item was claimed for, as its delivery needs it. */
export interface DeliveryTarget {
  id: number;
  /** The push address; "" for a pull runner, whose lease answers with the delivery. */
  address: string;
}

/** How the owner of an attempt took a delivery the dispatcher (or a lease) asked it to make. */
export type DeliverAnswer =
  /** The runner has it (a push answered 2xx), or the lease may hand out `payload`. */
  | { outcome: "delivered"; payload?: DeliveryPayload }
  /**
   * The runner did not take it: `reason` says how it answered. The attempt waits for a runner
   * again, at the front of `queue`.
   */
  | { outcome: "refused"; reason: string; queue: string }
  /** The attempt no longer wants a runner (it ended, moved on, or went to another runner). */
  | { outcome: "gone"; reason: string };

/** The FlowCoordinator's RPC methods (one object per flow, or per job outside any flow). */
export interface FlowCoordinatorRpc extends Rpc.DurableObjectBranded {
  /** Creates the flow (idempotent: an existing flow is returned as it is) and maybe starts it. */
  create(scope: FlowScope, input: CreateFlowInput): Promise<RpcResult<FlowView>>;
  /** Starts the flow; starting a started flow changes nothing. */
  start(scope: FlowScope): Promise<RpcResult<FlowView>>;
  /** Cancels the flow; cancelling twice changes nothing. */
  cancel(scope: FlowScope, reason: string): Promise<RpcResult<FlowView>>;
  /** Runs a failed flow again from its failed jobs. */
  rerun(scope: FlowScope): Promise<RpcResult<FlowView>>;
  /** The flow with every job's live status; null when there is no such flow. */
  view(scope: FlowScope, options?: { explain?: boolean }): Promise<RpcResult<FlowView | null>>;
  /** Applies a runner's event; resolves once the transition is durable. */
  handle(scope: FlowScope, event: FlowEvent, extras?: EventExtras): Promise<RpcResult<EventAnswer>>;
  /** Delivers a claimed attempt (a work item) to the runner its slot was claimed at. */
  deliver(scope: FlowScope, item: string, runner: DeliveryTarget): Promise<RpcResult<DeliverAnswer>>;
  /** The supervisor's poke: settle what is pending, act on due deadlines. */
  tick(scope: FlowScope): Promise<RpcResult<null>>;
  /** Tells the flow's stream that dispatch in its context was paused or resumed (once per change). */
  announce(scope: FlowScope, type: "flow.paused" | "flow.resumed", reason: string): Promise<RpcResult<null>>;
}

/**
 * Why a dispatcher is woken: attempts were queued (`work`), runners' slots were freed (`freed`:
 * which runners), messages for actors were posted (`mail`), the context's runners changed
 * (`runners`), or claims that may have been abandoned should be looked at (`reap`, by the
 * supervisor's sweep).
 */
export interface Wake {
  work?: boolean;
  freed?: number[];
  mail?: boolean;
  runners?: boolean;
  reap?: boolean;
}

/** One wake that says all two wakes said. */
export function mergeWakes(a: Wake | undefined, b: Wake | undefined): Wake {
  const freed = [...new Set([...(a?.freed ?? []), ...(b?.freed ?? [])])];
  const flag = (k: "work" | "mail" | "runners" | "reap") => (a?.[k] || b?.[k] ? { [k]: true } : {});
  return {
    ...flag("work"),
    ...flag("mail"),
    ...flag("runners"),
    ...flag("reap"),
    ...(freed.length > 0 ? { freed } : {}),
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
}

/**
 * The ContextFeed's RPC methods (one object per context): the context's stream, fed by its flows'
 * objects. Besides these, its `fetch` accepts subscribers' WebSockets.
 */
export interface ContextFeedRpc extends Rpc.DurableObjectBranded {
  /**
   * Takes a flow's `flow.*` events (at least once: what it has already is skipped); resolves
   * once they are journalled.
   */
  publish(scope: DispatchScope, flowId: number, events: FlowStreamEvent[]): Promise<void>;
}
