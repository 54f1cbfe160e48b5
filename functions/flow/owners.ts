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
    /** Sends an event to the owner; answers its outcome and the origin it was created at. */
    const send = async (event: FlowEvent): Promise<{ outcome: string; origin: string }> => {
      if (own) return { outcome: (await own(event)).outcome, origin: this.scope.origin };
      const stub = this.env.FLOW_COORDINATOR.get(this.env.FLOW_COORDINATOR.idFromName(coordinatorName(scope)));
      const answer = await stub.handle(scope, event);
      return "ok" in answer ? { outcome: answer.ok.outcome, origin: answer.ok.origin || scope.origin } : { outcome: "not-applicable", origin: "" };
    };
    const job = message.job[0];
    const base = { job: job?.id ?? 0, attempt: message.attempt ?? 1 };
    return {
      assign: async (_m, runner) => {
        const answer = await send({ type: "assigned", ...base, runner, at: Date.now() });
        return ["applied", "duplicate"].includes(answer.outcome) ? `${answer.origin}${jobPath(scope, base.job)}` : null;
      },
      delivered: async (_m, runner) => {
        await send({ type: "delivered", ...base, runner, acknowledged: true, at: Date.now() });
      },
      unassign: async (_m, runner) => {
        await send({ type: "unassigned", ...base, runner, at: Date.now() });
      },
    };
  }
}
