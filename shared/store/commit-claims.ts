import type { Keys } from "../keys.js";
import type { ReadyQueue } from "./ready-queue.js";
import type { ScriptReply } from "./script.js";
import { ScriptKeys } from "./script.js";

/**
 * The context hash's `dispatch_waiting` (written by its Dispatcher, read by a commit's claims):
 * which flows have queues in the dispatcher's ring. "none": no flow's; a flow id: that flow's
 * only; SEVERAL: more than one flow's. Unset means not known yet, and counts as several.
 */
export const WAITING_NONE = "none";
export const WAITING_SEVERAL = "*";

/**
 * Most items one claim in a commit takes from a queue (as a dispatcher's claim: Lua's unpack has
 * a limit, and one delivery call should stay short).
 */
const MOST_PER_CLAIM = 500;

/** Work a commit may claim: a queue it puts attempts in, and the runners to try, in order. */
export interface CommitClaim {
  queue: ReadyQueue;
  /** Push runners that may serve the queue (a hint: the script checks each against its record). */
  candidates: number[];
}

/** A runner as a claim in a commit read it: what a delivery to it needs. */
export interface ClaimedRunner {
  id: number;
  address: string;
  perPost: number;
  pubkey: string;
}

/** Work items a claim in a commit gave one runner, from one queue. */
export interface Claimed {
  queue: ReadyQueue;
  runner: ClaimedRunner;
  items: string[];
  /** The queue ran empty: the dispatcher need not be told of it. */
  drained: boolean;
  /** The runner has no free slot left: a slot the commit freed there was taken again. */
  full: boolean;
}

/** What a commit's script call did besides its sections. */
export interface CommitOutcome {
  /** The sections skipped as written before (memory was behind storage). */
  skipped: number[];
  /** The context's `dispatch_waiting` as its claims read it; undefined when none ran, or it is unset. */
  waiting: string | undefined;
  claimed: Claimed[];
  /** Candidates that are gone, pull, or do not serve the queue any more. */
  invalid: number[];
}

/**
 * The claims of a commit as one more section of its script call (see commitFlow's "C"): keys
 * and arguments to append to the commit's own. Its key positions count from the commit's keys
 * (`commitKeys`), the way its sections' do; new keys go after them.
 */
export function claimSection(
  keys: Keys,
  commitKeys: readonly string[],
  contextId: number,
  flowId: number,
  claims: readonly CommitClaim[],
  now: number,
): { keys: string[]; args: string[] } {
  const scriptKeys = new ScriptKeys(commitKeys);
  const at = (key: string) => String(scriptKeys.at(key));
  const args = ["0", String(claims.length)];
  claims.forEach(({ queue, candidates }, tag) => {
    const values = [
      at(keys.context(contextId)),
      String(now),
      String(flowId),
      String(MOST_PER_CLAIM),
      queue.scriptType ?? "",
      String(tag),
      ...candidates.flatMap((id) => [String(id), at(keys.runner(contextId, id)), at(keys.runnerSlots(contextId, id))]),
    ];
    args.push("C", at(queue.key), String(values.length), ...values);
  });
  return { keys: scriptKeys.list.slice(commitKeys.length), args };
}

/** Reads what a commit's script call returned after its sections: `{skipped, waiting, claimed, invalid}`. */
export function commitOutcome(reply: ScriptReply[], claims: readonly CommitClaim[]): CommitOutcome {
  const [skipped, waiting, claimed, invalid] = reply;
  const list = (value: ScriptReply | undefined) => (Array.isArray(value) ? value : []);
  return {
    skipped: list(skipped).map(Number),
    waiting: typeof waiting === "string" && waiting !== "" ? waiting : undefined,
    claimed: list(claimed).flatMap((entry): Claimed[] => {
      const [tag, drained, full, id, address, perPost, pubkey, items] = list(entry);
      const claim = claims[Number(tag)];
      if (!claim) return [];
      return [
        {
          queue: claim.queue,
          runner: { id: Number(id), address: String(address), perPost: Number(perPost) || 1, pubkey: String(pubkey) },
          items: list(items).map(String),
          drained: Number(drained) === 1,
          full: Number(full) === 1,
        },
      ];
    }),
    invalid: list(invalid).map(Number),
  };
}
