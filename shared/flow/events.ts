import type { DeliveryReport, EnvVars, FlowStatus, ResultMap } from "../model/index.js";
import type { DeadlineKind, FlowState } from "./state.js";

/** The first of the job ids and of the message ids the shell allocated for jobs joining a flow. */
export interface GrowthIds {
  job: number;
  message: number;
}

/**
 * Something that happened to a flow. `at` is epoch milliseconds. Events that may fail a job
 * carry `random` in [0, 1): the jitter of its retry's backoff, chosen by the shell so the machine
 * stays a pure function.
 */
export type FlowEvent =
  | { type: "start"; at: number }
  | { type: "assigned"; job: number; attempt: number; runner: number; at: number }
  /** The assigned runner could not take it (`reason` says how it answered): the attempt may go to another runner. */
  | { type: "unassigned"; job: number; attempt: number; runner: number; reason?: string; at: number }
  /**
   * The runner has the attempt: it acknowledged it (a push answered 2xx), or not yet (a pull
   * lease handed it out; a push whose answer never came, `unconfirmed` saying why: it may have
   * reached the runner, so it is never sent again, and the acknowledgement deadline decides).
   */
  | {
      type: "delivered";
      job: number;
      attempt: number;
      runner: number;
      acknowledged: boolean;
      unconfirmed?: string;
      at: number;
    }
  | { type: "acknowledged"; job: number; attempt: number; runner: number; at: number }
  | { type: "started"; job: number; attempt: number; runner: number; at: number }
  | { type: "heartbeat"; job: number; attempt: number; runner: number; at: number }
  /** Log lines of the running attempt arrived (the shell appends them to its message). */
  | { type: "logs"; job: number; attempt: number; runner: number; at: number }
  /**
   * The attempt finished with its result. `jobs` are jobs its result adds to the flow (a flow
   * file's jobs, not checked yet: the machine checks them, growth.ts), with `ids` allocated for
   * them by the shell, or `refused` saying why the shell refused them (what needs storage to
   * check: the flow's actor, pinned runners). Added jobs refused end the attempt in error.
   */
  | {
      type: "finished";
      job: number;
      attempt: number;
      runner: number;
      result: ResultMap;
      jobs?: unknown[];
      ids?: GrowthIds;
      refused?: string;
      at: number;
    }
  | { type: "failed"; job: number; attempt: number; runner: number; error: string; at: number; random?: number }
  /** A deadline came due. For a delivery deadline, `why` may say why no runner took the attempt. */
  | { type: "deadline"; job: number; attempt: number; kind: DeadlineKind; at: number; random?: number; why?: string }
  /** Moves a pending deadline later (a delivery deadline while the context is paused). */
  | { type: "postponed"; job: number; attempt: number; kind: DeadlineKind; until: number; at: number }
  /**
   * Cancels the flow; with `compensate`, a flow that has compensations unwinds (the compensations
   * of its jobs that finished run) instead of ending in error.
   */
  | { type: "cancel"; reason: string; at: number; compensate?: boolean }
  /**
   * An event a wait of the flow matched (by its name and key, through the context's index of
   * waits): the wait finishes with the event's data as its result. `id` is the event's.
   */
  | { type: "event"; job: number; id: string; name: string; key: string; data: ResultMap; at: number }
  /** The child flow attempt `attempt` of a child-flow job started is `child` (children.ts). */
  | { type: "childStarted"; job: number; attempt: number; child: number; at: number }
  /** A child-flow job's child ended: the job ends with it (its result, or failed with its error). */
  | {
      type: "childEnded";
      job: number;
      attempt: number;
      child: number;
      status: "finished" | "error";
      result?: Record<string, ResultMap>;
      error?: string;
      at: number;
    }
  /** A child-flow job's child could not be started for a reason a retry does not change (template gone, inputs refused). */
  | { type: "childRefused"; job: number; attempt: number; error: string; at: number }
  /**
   * Storage was out of reach for `downFor` ms, up to `until` (when it came back; `at` when
   * absent), so the coordinator could take no report: the delivery, acknowledgement and result
   * deadlines pending move that much later (the outage is not charged to runners), and a wait's
   * timeout by the part of the outage after the wait started.
   */
  | { type: "resumed"; downFor: number; at: number; until?: number }
  /**
   * Runs a flow again (rerun.ts): a failed one from its failed jobs (one whose unwinding failed,
   * from its failed compensations); with `from`, one that ended
   * from that job and everything downstream of it. `env` goes over the flow's env from this run
   * on; `run`, when given, is the run the caller means to replace (any other is refused).
   * `bases` gives each job run again the first of a fresh block of message ids.
   */
  | {
      type: "rerun";
      bases: Record<number, number>;
      at: number;
      from?: number;
      env?: EnvVars;
      run?: number;
    }
  /** A map's instances get their ids (allocated by the shell after its `expand`): the map expands. */
  | { type: "expanded"; job: number; ids: GrowthIds; at: number };

/** What the shell must do because of a transition. */
export type FlowEffect =
  | { type: "flowStarted" }
  /** Send this attempt of the job to a runner (its message is created with the transition). */
  | { type: "dispatch"; job: number; attempt: number }
  /** An attempt failed and the job will be tried again (its message is settled as an error). */
  | { type: "attemptFailed"; job: number; attempt: number }
  /** The job reached a final status (finished, error or skipped). */
  | { type: "jobEnded"; job: number }
  /** A job failed for good: keep it in the context's dead letters, with why and how often. */
  | { type: "deadLetter"; job: number; kind: "job" | "undeliverable"; reason: string }
  /** Tell the runner of an attempt in flight to stop it. */
  | { type: "cancelJob"; job: number; attempt: number; runner: number; reason: string }
  /** The flow began to unwind: its status is compensating (its compensations run as they may). */
  | { type: "flowCompensating" }
  /** The flow reached a final status: report it to the actor. */
  | { type: "flowEnded" }
  /**
   * The flow runs again (its run number is the state's): `jobs` run again, `was` is how it had
   * ended, `from` the job asked for, `env` the names of the variables the re-run changed.
   */
  | { type: "flowRerun"; jobs: number[]; was: FlowStatus; from?: number; env?: string[] }
  /** A wait started: the context's index of waits by event name and key gets it (until it ends). */
  | { type: "waitStarted"; job: number }
  /** A sleep started (nothing to write: its deadline is the flow's, in its object's journal). */
  | { type: "sleepStarted"; job: number }
  /**
   * A child-flow job's attempt needs its child looked after: started (idempotently, by the
   * job and attempt) when `child` is not known yet, else read, and its end told if it ended.
   */
  | { type: "superviseChild"; job: number; attempt: number; child?: number }
  /** Cancel the child flow of a job that ended without it (its flow was cancelled or failed). */
  | { type: "cancelChild"; job: number; attempt: number; child?: number; reason: string }
  /**
   * A map started: it needs `jobs` job ids and `messages` message ids for its instances, which
   * the shell allocates and sends back (`expanded`). Its deadline of kind `expand` asks the same
   * should the shell forget it.
   */
  | { type: "expand"; job: number; jobs: number; messages: number }
  /** Jobs joined the flow (a map's instances, jobs `by`'s result added): their records are stored. */
  | { type: "jobsAdded"; jobs: number[]; by: number };

/**
 * The event that ends an attempt as its runner told it, through the `result` webhook or in its
 * answer to the delivery: finished with its result, or failed with its error.
 */
export function reportedEnd(
  base: { job: number; attempt: number; runner: number; at: number },
  report: Pick<DeliveryReport, "status" | "result" | "error" | "jobs">,
): FlowEvent {
  return report.status === "finished"
    ? { type: "finished", ...base, result: report.result, ...(report.jobs?.length ? { jobs: report.jobs } : {}) }
    : { type: "failed", ...base, error: report.error ?? "the runner reported an error" };
}

/** How an event was taken: applied, already applied (a replay), or refused and why. */
export type TransitionOutcome = "applied" | "duplicate" | "stale" | "wrong-runner" | "not-applicable";

export interface Transition {
  state: FlowState;
  effects: FlowEffect[];
  outcome: TransitionOutcome;
  /** Why an event was not applied, for the caller. */
  reason?: string;
}

export function unchanged(
  state: FlowState,
  outcome: Exclude<TransitionOutcome, "applied">,
  reason: string,
): Transition {
  return { state, effects: [], outcome, reason };
}
