import type { FlowEvent, Transition } from "../../shared/flow/index.js";
import type { Message } from "../../shared/model/index.js";
import type { Env } from "../env.js";
import type { MessageOwner } from "./relay.js";
import { coordinatorName, jobPath, type FlowScope } from "./scope.js";

/** The scope of the FlowCoordinator that owns a job message. */
export function scopeOfMessage(message: Message, like: Pick<FlowScope, "prefix" | "origin">): FlowScope {
  const job = message.job[0];
  const flowId = job?.flow_id ?? 0;
  return {
    prefix: like.prefix,
    origin: like.origin,
    contextId: message.context_id,
    flowId,
    ...(flowId === 0 && job ? { job: { callerId: message.caller_id, id: job.id } } : {}),
  };
}

/**
 * How the relay reaches the owner of each message: this coordinator for its own messages
 * (straight into its queue), another one through its Durable Object stub.
 */
export class MessageOwners {
  constructor(
    private readonly env: Env,
    private readonly scope: FlowScope,
    private readonly enqueueOwn: ((event: FlowEvent) => Promise<Transition>) | undefined,
  ) {}

  for(message: Message): MessageOwner {
    const scope = scopeOfMessage(message, this.scope);
    const own = this.enqueueOwn && coordinatorName(scope) === coordinatorName(this.scope) ? this.enqueueOwn : undefined;
    const send = async (event: FlowEvent): Promise<string> => {
      if (own) return (await own(event)).outcome;
      const stub = this.env.FLOW_COORDINATOR.get(this.env.FLOW_COORDINATOR.idFromName(coordinatorName(scope)));
      const answer = await stub.handle(scope, event);
      return "ok" in answer ? answer.ok.outcome : "not-applicable";
    };
    const job = message.job[0];
    const base = { job: job?.id ?? 0, attempt: message.attempt ?? 1 };
    return {
      assign: async (_m, runner) => ["applied", "duplicate"].includes(await send({ type: "assigned", ...base, runner, at: Date.now() })),
      delivered: async (_m, runner) => {
        await send({ type: "delivered", ...base, runner, acknowledged: true, at: Date.now() });
      },
      unassign: async (_m, runner) => {
        await send({ type: "unassigned", ...base, runner, at: Date.now() });
      },
      callbackBase: () => `${scope.origin}${jobPath(scope, base.job)}`,
    };
  }
}
