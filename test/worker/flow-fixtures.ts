import { expect } from "vitest";
import { apply, newFlowState, type DagJob, type FlowEvent, type FlowState } from "../../shared/flow/index.js";
import type { Keys } from "../../shared/keys.js";
import type { Runner } from "../../shared/model/index.js";
import { connectStore, type CommitStep, type Store } from "../../shared/store/index.js";

// What the module tests of the FlowCoordinator's parts build their flows from.

/** An sh job of a flow, ready for newFlowState. */
export function shJob(id: number, name: string, depends: number[] = []): DagJob {
  return {
    id,
    name,
    script: `echo ${name}`,
    script_type: "sh",
    timeout: 60,
    retries: 0,
    env_vars: {},
    prerequisites: [],
    depends,
  };
}

/** Flow 1 of `callerId` (9) in a context, its messages numbered from 100, delivery timeout `timeout` s. */
export function flowOf(
  contextId: number,
  jobs: DagJob[],
  options: { timeout?: number; callerId?: number } = {},
): FlowState {
  return newFlowState({
    id: 1,
    contextId,
    callerId: options.callerId ?? 9,
    envVars: {},
    timeouts: { timeout: options.timeout ?? 300, timeout_ack: 60 },
    traceId: "0af7651916cd43dd8448eb211c80319c",
    jobs,
    messageBase: 100,
  });
}

/** The state after `events`, each of which must apply, and the step of each (what planCommit takes). */
export function stepsThrough(state: FlowState, events: FlowEvent[]): { state: FlowState; steps: CommitStep[] } {
  const steps: CommitStep[] = [];
  for (const event of events) {
    const t = apply(state, event);
    expect(t.outcome, JSON.stringify(event)).toBe("applied");
    state = t.state;
    steps.push({ state, effects: t.effects });
  }
  return { state, steps };
}

/** The state after `events`, each of which must apply. */
export function through(state: FlowState, events: FlowEvent[]): FlowState {
  return stepsThrough(state, events).state;
}

/** A Store whose endpoint nothing listens at: every call fails as when storage is away. */
export function unreachableStore(keys: Keys): Store {
  return connectStore({ url: "http://127.0.0.1:1", token: "none", retries: 0 }, keys);
}

/** A push runner of sh jobs in context `ctx` (listening nowhere: port 9), as a store creates it. */
export function pushRunner(
  ctx: number,
  fields: Partial<Runner> = {},
): Omit<Runner, "id" | "created_at" | "updated_at"> {
  return {
    context_id: ctx,
    pubkey: "11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo",
    address: "http://127.0.0.1:9/",
    topic: "runner",
    local: false,
    runner_type: "sh",
    script_types: ["sh"],
    concurrency: 2,
    deliveries_per_post: 1,
    ...fields,
  };
}
