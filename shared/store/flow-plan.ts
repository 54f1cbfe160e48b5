import { DEAD_LETTERS_MAX } from "./scripts/dead-letter-cap.js";
import { CALL_BYTES, CallPacker, type PlanCall } from "./commit-calls.js";
import { StepSection, type BatchOutput, type CommitStep, type Op } from "./commit-sections.js";
import type { Keys } from "../keys.js";
import type { Message } from "../model/index.js";
import type { ReadyQueue } from "./ready-queue.js";

export { deadlineOwner, type CommitStep } from "./commit-sections.js";
export type { PlanCall } from "./commit-calls.js";

/** What `commitFlow` runs, and what it leaves for dispatch to do. */
export interface CommitPlan {
  /** The first call's KEYS and ARGV. */
  keys: string[];
  args: string[];
  /**
   * The calls after the first, in order, when the batch is too big for one (commit-calls.ts):
   * each commitFlow's, of whole sections. Absent for all but batches of thousands of messages.
   */
  more?: PlanCall[];
  /** The messages it creates: job attempts (queued for runners) and a flow's result (in its caller's inbox). */
  messages: Message[];
  /** Sections in step order, over all its calls; a skipped section means that step was already written. */
  sections: number;
  /** The flow's queues it puts job attempts in: the context's dispatcher has work there. */
  queued: ReadyQueue[];
  /** The runners whose slots it frees: work waiting for them may go now. */
  freed: number[];
  /** The work items whose slots it frees (what the dispatcher need not mark delivered any more). */
  released?: string[];
  /** It puts a flow's result on msg_out, for the relay to POST to its caller's https addresses. */
  notifies: boolean;
  /**
   * On a Redis Cluster (`Keys.cluster`): the context and the due time its sweep must have at the
   * latest, written after the calls (`ZADD sweep:due LT`), since the due set is in another slot.
   */
  sweepDue?: { contextId: number; at: number };
}

/**
 * Turns applied transitions into one `commitFlow` call: per step a section, guarded by a write
 * that changes something only the first time (a job's ended_at, a new message, the flow's
 * started_at or ended_at, a re-run clearing ended_at), so a step written once is never written
 * twice, whether the transition was replayed or the script call itself was retried. Only what
 * changed is written: an ended job's status, result and end (its message's final status is read
 * from it), the messages of newly dispatched jobs (their work items queued by script type, or for
 * the runner a job is pinned to), the freeing of the slot an ended attempt held, the flow's status.
 * Statuses in between (waiting, started) live in the Durable Object, not in Redis.
 * `deadLettersMax` is the deployment's cap on a context's dead letters (DEAD_LETTERS_MAX);
 * `firstRoom`, what the first call may carry (less when a creation goes in the same call). In
 * time and size linear in what the batch writes.
 */
export function planCommit(
  keys: Keys,
  steps: CommitStep[],
  now: number,
  deadLettersMax: number = DEAD_LETTERS_MAX,
  firstRoom: number = CALL_BYTES,
): CommitPlan {
  const out: BatchOutput = { messages: [], ready: new Map(), frees: new Map(), notifies: false };
  const calls = new CallPacker(firstRoom);
  for (const step of steps) {
    const section = new StepSection(keys, step, now, deadLettersMax, out);
    for (const effect of step.effects) section.write(effect);
    for (const part of section.close()) calls.add(part);
  }
  // The frees of the whole batch, unguarded (a ZREM is idempotent), after every section.
  const frees: Op[] = [...out.frees].map(([key, { items }]) => ["R", key, items]);
  calls.add({ guarded: false, ops: frees });
  const [first, ...more] = calls.done() as [PlanCall, ...PlanCall[]];
  return {
    keys: first.keys,
    args: first.args,
    ...(more.length > 0 ? { more } : {}),
    messages: out.messages,
    sections: first.sections + more.reduce((sum, call) => sum + call.sections, 0),
    queued: [...out.ready.values()],
    freed: [...out.frees.values()].map((f) => f.runner),
    released: [...out.frees.values()].flatMap((f) => f.items),
    notifies: out.notifies,
    ...(out.sweepDue !== undefined ? { sweepDue: { contextId: steps[0]!.state.contextId, at: out.sweepDue } } : {}),
  };
}
