import { newFlowState, type FlowState } from "../../shared/flow/index.js";
import { createdChange } from "../../shared/flow/changes.js";
import { ConflictError, type Store } from "../../shared/store/index.js";
import type { CreateFlowInput } from "../core/contracts.js";
import type { FlowScope } from "../core/scopes.js";
import type { FlowBinding } from "./binding.js";
import type { Deadlines } from "./deadlines.js";
import type { FeedRelay } from "./feed-relay.js";
import type { GroupCommit } from "./group-commit.js";
import { storeNewFlow } from "./stored.js";
import type { FlowStream } from "./stream.js";

/** The parts of a FlowCoordinator a creation uses. */
export interface CreationHost {
  readonly binding: FlowBinding;
  readonly commits: GroupCommit;
  readonly stream: FlowStream;
  readonly relay: FeedRelay;
  readonly deadlines: Deadlines;
  store(): Store;
}

/**
 * Stores a new flow (and starts it, if asked, in the same script call), with a new incarnation
 * token; reads the flow back when its id is taken. Memory is not read from storage first: the
 * script itself refuses an id that is taken, and only then is the flow there read (a retried
 * submission, or another flow under a chosen id).
 */
export async function createNow(host: CreationHost, scope: FlowScope, input: CreateFlowInput): Promise<void> {
  const { commits } = host;
  const state: FlowState = newFlowState({
    id: scope.flowId,
    contextId: scope.contextId,
    callerId: input.callerId,
    envVars: input.envVars,
    timeouts: input.timeouts,
    traceId: input.traceId,
    priority: input.priority,
    maxParallel: input.maxParallel,
    notifyHttps: input.notifyHttps,
    template: input.template,
    parent: input.parent,
    identity: input.identity,
    jobs: input.jobs,
    messageBase: input.messageBase,
  });
  const created = createdChange(state, Date.now());
  const token = crypto.randomUUID();
  // The scope and the new incarnation are kept first: the commit arms the alarm, which must
  // find them should the object die then.
  await host.binding.creating(token, async () => {
    let stored: boolean;
    try {
      if (input.start && !scope.job) {
        await commits.createWith(state, input.chosen, created, { type: "start", at: Date.now() }, token);
        stored = true;
      } else {
        stored = await storeNewFlow(host.store(), host.binding.bound, state, input.chosen, token);
        if (stored) {
          commits.adopt(state);
          host.stream.append(scope, state.traceId, [created]);
        }
      }
    } catch (error) {
      // The outcome may be unknown (storage timed out, yet may run it): read it back next time.
      commits.forget();
      if (!(error instanceof ConflictError && error.kind === "flow")) throw error;
      stored = false;
    }
    if (!stored) commits.forget();
    await commits.load();
  });
  await host.binding.keep();
  if (!(await host.relay.forward(scope))) await host.deadlines.arm(commits.current, true);
}
