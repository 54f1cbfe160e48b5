import { ScriptKeys } from "./script.js";
import { DEAD_LETTERS_MAX } from "./scripts/dead-letter-cap.js";
import { StepSection, type BatchOutput, type CommitStep } from "./commit-sections.js";
import type { Keys } from "../keys.js";
import type { Message } from "../model/index.js";
import type { ReadyQueue } from "./ready-queue.js";

export { deadlineOwner, type CommitStep } from "./commit-sections.js";

/** What `commitFlow` runs, and what it leaves for dispatch to do. */
export interface CommitPlan {
  keys: string[];
  args: string[];
  /** The messages it creates: job attempts (queued for runners) and a flow's result (in its caller's inbox). */
  messages: Message[];
  /** Sections in step order; a skipped section means that step was already written. */
  sections: number;
  /** The flow's queues it puts job attempts in: the context's dispatcher has work there. */
  queued: ReadyQueue[];
  /** The runners whose slots it frees: work waiting for them may go now. */
  freed: number[];
  /** The work items whose slots it frees (what the dispatcher need not mark delivered any more). */
  released?: string[];
  /** It puts a flow's result on msg_out, for the relay to POST to its caller's https addresses. */
  notifies: boolean;
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
 * `deadLettersMax` is the deployment's cap on a context's dead letters (DEAD_LETTERS_MAX).
 */
export function planCommit(
  keys: Keys,
  steps: CommitStep[],
  now: number,
  deadLettersMax: number = DEAD_LETTERS_MAX,
): CommitPlan {
  const out: BatchOutput = {
    scriptKeys: new ScriptKeys(),
    messages: [],
    ready: new Map(),
    frees: new Map(),
    notifies: false,
  };
  const at = (key: string) => String(out.scriptKeys.at(key));
  const args: string[] = [];
  let sections = 0;
  for (const step of steps) {
    const section = new StepSection(keys, step, now, deadLettersMax, out);
    for (const effect of step.effects) section.write(effect);
    const { guarded, ops } = section.close();
    if (ops.length === 0) continue;
    sections++;
    args.push(guarded ? "1" : "0", String(ops.length));
    for (const [op, key, values] of ops) args.push(op, at(key), String(values.length), ...values);
  }
  if (out.frees.size > 0) {
    sections++;
    args.push("0", String(out.frees.size));
    for (const [key, { items }] of out.frees) args.push("R", at(key), String(items.length), ...items);
  }
  return {
    keys: out.scriptKeys.list,
    args,
    messages: out.messages,
    sections,
    queued: [...out.ready.values()],
    freed: [...out.frees.values()].map((f) => f.runner),
    released: [...out.frees.values()].flatMap((f) => f.items),
    notifies: out.notifies,
  };
}
