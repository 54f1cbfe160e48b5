import type { CancelPayload, DeliveryPayload } from "../shared/model/index.js";
import { AnswerWindow, ToldEnds } from "./answer-window.js";
import { runDelivery, type JobDeps, type RunnerLog } from "./job.js";
import type { Acceptance } from "./push-server.js";
import { attemptKey, deliveryKey, RecentAttempts } from "./recent-attempts.js";

/** Who the runner is and what it takes: what deciding on a delivery needs. */
export interface AttemptRules {
  contextId: number;
  runnerId: number;
  concurrency: number;
  scriptTypes: string[];
  /** Push: hold an answer up to this many ms for the job's end (0: answer at once). */
  answerWithinMs: number;
}

/**
 * The attempts a runner holds: which it takes (`accept` for a push, `take` for a lease), running
 * each with `runDelivery`, the cancels of those running, and the dedupe of deliveries that come
 * again (deliveries are at-least-once: a repeat is answered as the first was, never run twice).
 */
export class RunnerAttempts {
  /** Attempts running now, by attempt key. */
  private readonly running = new Map<string, Promise<void>>();
  /** How to stop each running attempt when the coordinator cancels it. */
  private readonly cancels = new Map<string, AbortController>();
  /** Attempts taken here, running or ended lately. */
  private readonly recent: RecentAttempts;
  /** Ends told in answers: a delivery of such an attempt sent again is answered the same. */
  private readonly told = new ToldEnds();
  /**
   * Attempts whose script ended and whose result is on its way (in a batch, perhaps): they take
   * no push slot here any more. The coordinator frees their slot when it applies the result, and
   * may push the next job before that answer is back: a slot counted until then would refuse it.
   */
  private readonly reporting = new Set<string>();
  private waiters: (() => void)[] = [];
  /** Taking no new work (a push is answered 503); what runs finishes. */
  draining = false;

  constructor(
    private readonly deps: JobDeps,
    private readonly rules: AttemptRules,
    private readonly log: RunnerLog,
  ) {
    this.recent = new RecentAttempts({ warn: log.warn });
  }

  /** Jobs running now. */
  get size(): number {
    return this.running.size;
  }

  /** Push slots in use: running attempts whose result is not on its way yet. */
  private busy(): number {
    return this.running.size - this.reporting.size;
  }

  /** How a pushed delivery is answered, starting it when it is taken. */
  accept(payload: DeliveryPayload): Acceptance {
    const { contextId, runnerId, concurrency, scriptTypes, answerWithinMs } = this.rules;
    if (payload.context_id !== contextId || payload.runner_id !== runnerId) {
      return { refused: `this delivery is for runner ${payload.runner_id} of context ${payload.context_id}` };
    }
    const key = deliveryKey(payload);
    if (this.recent.has(key)) {
      // Answered as the first was: 2xx (with the end, if the first answer told it), not run again.
      const report = this.told.get(key);
      return report ? { ending: Promise.resolve(report) } : "duplicate";
    }
    if (this.draining) return "draining";
    if (this.busy() >= concurrency) return "busy";
    const type = (payload.message.job[0] as { script_type: string }).script_type;
    if (!this.deps.executorFor(type))
      return { refused: `this runner does not run ${type} scripts (it runs ${scriptTypes.join(", ")})` };
    this.recent.take(key);
    if (answerWithinMs === 0) {
      this.start(payload, false);
      return "accepted";
    }
    const answer = new AnswerWindow(answerWithinMs);
    this.start(payload, false, answer);
    return { ending: answer.ending, unanswered: () => answer.unanswered() };
  }

  /** A leased delivery: assigned to this runner, so it runs even while draining (once). */
  take(payload: DeliveryPayload): void {
    if (this.recent.take(deliveryKey(payload))) this.start(payload, true);
  }

  /** Stops a running attempt the coordinator cancelled; false when it does not run here. */
  cancel(c: CancelPayload["cancel"]): boolean {
    const controller = this.cancels.get(attemptKey(c));
    controller?.abort(`cancelled by the coordinator: ${c.reason}`);
    return controller !== undefined;
  }

  /** Resolves when an attempt ends (a lease may take more then). */
  slotFreed(): Promise<void> {
    return new Promise<void>((resolve) => this.waiters.push(resolve));
  }

  /** Resolves once every attempt running now (and any started meanwhile) has ended. */
  async settled(): Promise<void> {
    while (this.running.size > 0) await Promise.all(this.running.values());
  }

  /** Runs an attempt taken here (`recent.take` said it is no repeat). */
  private start(payload: DeliveryPayload, ack: boolean, answer?: AnswerWindow): void {
    const key = deliveryKey(payload);
    const cancel = new AbortController();
    this.cancels.set(key, cancel);
    const ended = () => void this.reporting.add(key);
    const sink = answer ? answer.sink(this.deps.sink, (report) => this.told.remember(key, report)) : this.deps.sink;
    const run = runDelivery(payload, { ...this.deps, sink }, { ack, cancel: cancel.signal, ended }).then(
      () => undefined,
      (error: Error) => this.log.warn(`job ${payload.job_id} (attempt ${payload.attempt}) crashed: ${error.message}`),
    );
    this.running.set(
      key,
      run.finally(() => {
        this.running.delete(key);
        this.reporting.delete(key);
        this.cancels.delete(key);
        this.recent.release(key);
        for (const wake of this.waiters.splice(0)) wake();
      }),
    );
  }
}
