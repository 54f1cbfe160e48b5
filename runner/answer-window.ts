import { jsonBytes, type DeliveryReport } from "../shared/model/index.js";
import type { ReportSink } from "./report-sink.js";

/**
 * The longest a delivery's answer may wait for its job's end: well within the coordinator's 10 s
 * for an answer, so that a batch of jobs that all take about this long is still answered.
 */
export const MAX_ANSWER_WITHIN_MS = 5_000;

/**
 * The most bytes of a report told in an answer: a bigger one goes out as a webhook (answered as
 * taken), so that an answer to a POST of 100 deliveries (the most one carries) stays under the
 * coordinator's limit for an answer, 4 MiB (docs/limits.md).
 */
export const MAX_TOLD_BYTES = 32 * 1024;

/** Attempts' ends told in answers, kept to answer a delivery sent again the same way. */
const TOLD_MEMORY = 1_000;

/**
 * A push runner's answer held open for a job's end (`--answer-within`): the delivery is answered
 * with the job's result when the job ends within `ms` (the acknowledgement and the result in one
 * message, no result webhook), or as taken (202) when the time runs out first, the result then
 * going out as a report. Whichever comes first decides: one thread, so never neither. Should the
 * coordinator hang up before the answer went out (it waits `DELIVERY_TIMEOUT_MS`, and never sends
 * the delivery again), the result goes out as a report all the same (`unanswered`).
 */
export class AnswerWindow {
  private open = true;
  /** Sends the result the answer was to carry as a report instead. */
  private resend: (() => void) | undefined;
  private tell: (report: DeliveryReport | undefined) => void = () => undefined;
  /** What the delivery is answered with: the attempt's end, or nothing (answered as taken). */
  readonly ending = new Promise<DeliveryReport | undefined>((resolve) => (this.tell = resolve));
  private readonly timer: NodeJS.Timeout;

  constructor(ms: number) {
    this.timer = setTimeout(() => this.close(undefined), ms);
  }

  /**
   * The sink an attempt reports through: its result goes into the answer while the window is
   * open, everything else (and a result after it closed) to `sink`.
   */
  sink(sink: ReportSink, told: (report: DeliveryReport) => void): ReportSink {
    return {
      send: (target, event, body, retryForMs) => {
        if (event !== "result" || !this.open) return sink.send(target, event, body, retryForMs);
        const { attempt: _attempt, ...report } = body;
        if (jsonBytes(report) > MAX_TOLD_BYTES) {
          this.close(undefined);
          return sink.send(target, event, body, retryForMs);
        }
        told(report as DeliveryReport);
        this.resend = () => void sink.send(target, event, body, retryForMs);
        this.close(report as DeliveryReport);
        // The coordinator reads it from the answer: as far as the job knows, it was taken.
        return Promise.resolve({ ok: true, status: 200, body: null });
      },
    };
  }

  /**
   * The answer did not reach the coordinator (it hung up before it was written): the result goes
   * out as a report, at once if the answer was to carry it, else when the job ends. The
   * coordinator takes a result it already had as a duplicate.
   */
  unanswered(): void {
    const resend = this.resend;
    this.resend = undefined;
    if (this.open) this.close(undefined);
    else resend?.();
  }

  private close(report: DeliveryReport | undefined): void {
    if (!this.open) return;
    this.open = false;
    clearTimeout(this.timer);
    this.tell(report);
  }
}

/** The ends told in answers, by attempt key, the oldest forgotten first. */
export class ToldEnds {
  private readonly byKey = new Map<string, DeliveryReport>();

  remember(key: string, report: DeliveryReport): void {
    this.byKey.set(key, report);
    if (this.byKey.size > TOLD_MEMORY) this.byKey.delete(this.byKey.keys().next().value as string);
  }

  get(key: string): DeliveryReport | undefined {
    return this.byKey.get(key);
  }
}
