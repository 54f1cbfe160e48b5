import type { FlowEvent } from "../../shared/flow/index.js";
import type { Context, EventInput, EventSent } from "../../shared/model/index.js";
import type { EventTaken } from "../../shared/store/event-store.js";
import type { EventAnswer } from "../core/contracts.js";
import { Problem, unwrap, type ProblemData, type RpcResult } from "../core/problem.js";
import { coordinatorStub } from "../core/stubs.js";
import { senderContext } from "./access.js";
import { callScope, type FlowCall } from "./call.js";

type WaitEvent = Extract<FlowEvent, { type: "event" }>;

/** The digest that tells one event from another under the same id: its name, key and data. */
async function digestOf(input: EventInput): Promise<string> {
  const data = Object.entries(input.data).sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
  const text = JSON.stringify([input.name, input.key, data]);
  const bytes = new Uint8Array(await crypto.subtle.digest("SHA-256", new TextEncoder().encode(text)));
  return [...bytes.slice(0, 16)].map((b) => b.toString(16).padStart(2, "0")).join("");
}

/**
 * Sends an event to the context's waits (an actor allowed to execute there, or a runner of the
 * context): the index of waits for its name and key is read in one script call, which also
 * keeps the event for later waits (the context's `event_lookback`) and remembers its id; then
 * each matched wait's flow takes it (its machine ends the wait once, whatever repeats). The
 * answer comes once every matched flow answered: a sender that lost it sends the same id again,
 * and the same waits are offered the event again (none takes it twice).
 */
export async function sendEvent(call: FlowCall, contextId: number, input: EventInput): Promise<EventSent> {
  const context: Context = await senderContext(call, contextId);
  const id = input.id ?? crypto.randomUUID();
  const digest = await digestOf(input);
  const now = Date.now();
  const taken = await call.store.events.send(contextId, { ...input, id, digest }, context.event_lookback ?? 0, now);
  if (taken.duplicate && taken.digest !== digest)
    throw new Problem("conflict", `event id ${id} was sent before with another name, key or data`, { id });
  const event = { type: "event" as const, id, name: input.name, key: input.key, data: input.data, at: now };
  const outcomes = await Promise.all(taken.waits.map((wait) => offer(call, contextId, wait, event)));
  return {
    id,
    duplicate: taken.duplicate,
    matched: taken.waits.length,
    resumed: outcomes.filter((o) => o === "applied").length,
    ...(taken.more ? { more: true } : {}),
  };
}

/**
 * Offers the event to one wait's flow: the outcome its machine gave. A flow that is gone (removed
 * while its wait was indexed) leaves the index; a flow that could not be reached fails the send
 * (503 or 500 as the problem says), so the sender tries again with the same id.
 */
async function offer(
  call: FlowCall,
  contextId: number,
  wait: EventTaken["waits"][number],
  event: Omit<WaitEvent, "job">,
): Promise<EventAnswer["outcome"]> {
  const scope = callScope(call, contextId, { flowId: wait.flowId });
  const answer: RpcResult<EventAnswer> = await coordinatorStub(call.env, scope).takeEvent(scope, {
    ...event,
    job: wait.jobId,
  });
  const problem = "problem" in answer ? (answer.problem as ProblemData) : undefined;
  if (problem?.kind === "not-found") {
    await call.store.events.dropWait(contextId, event.name, event.key, wait);
    return "not-applicable";
  }
  return unwrap(answer).outcome;
}
