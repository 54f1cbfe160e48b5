import type { DeliveryPayload } from "../shared/model/index.js";

/**
 * How long an attempt that ended is remembered: six times the 10 minutes a runner keeps sending
 * an attempt's result (job.ts). The coordinator sends an attempt again only while it is current
 * there, so never once its result was taken.
 */
export const RECENT_ATTEMPTS_WINDOW_MS = 60 * 60_000;
/**
 * The most attempts remembered after they ended: 28 a second for the whole window. Each costs
 * about 190 bytes (measured in Node 22 with keys of 21 characters): 19 MB at most.
 */
export const RECENT_ATTEMPTS_MAX = 100_000;

/** What names one attempt of a job: its context, its message (ids per caller) and its number. */
export interface AttemptRef {
  context_id: number;
  caller_id: number;
  message_id: number;
  attempt: number;
}

/**
 * The key of an attempt. A delivery and a cancel of the same attempt give the same key, so both
 * go through here.
 */
export function attemptKey(ref: AttemptRef): string {
  return `${ref.context_id}:${ref.caller_id}:${ref.message_id}:${ref.attempt}`;
}

/** The attempt key of a delivery. */
export function deliveryKey(p: DeliveryPayload): string {
  return attemptKey({
    context_id: p.context_id,
    caller_id: p.message.caller_id,
    message_id: p.message.id,
    attempt: p.attempt,
  });
}

/**
 * The attempts a runner (or a fleet's gateway) took lately, so that a delivery of one it already
 * took is answered 2xx and not run again. Deliveries are at least once: the coordinator sends an
 * attempt again when it never learned how the first POST went (its object lost its memory in the
 * middle, a connection cut after the request went out, which it cannot tell from a refusal), never
 * because an answer was late. An attempt is held from `take` until `release`, and remembered for
 * `windowMs` after that, at most `max` of them: past that the ones released longest ago are
 * forgotten first (a warning says so, once).
 */
export class RecentAttempts {
  private readonly held = new Set<string>();
  /** Released attempts and when, oldest first (a Map keeps the order they were set in). */
  private readonly released = new Map<string, number>();
  private warned = false;

  constructor(private readonly options: { windowMs?: number; max?: number; warn?: (line: string) => void } = {}) {}

  /** Whether the attempt is held, or was released within the window: a delivery of it is a repeat. */
  has(key: string, now = Date.now()): boolean {
    if (this.held.has(key)) return true;
    const at = this.released.get(key);
    return at !== undefined && at > now - this.windowMs();
  }

  /** Takes the attempt unless it is held or recent: false means it is a repeat, to be dropped. */
  take(key: string, now = Date.now()): boolean {
    if (this.has(key, now)) return false;
    this.released.delete(key);
    this.held.add(key);
    return true;
  }

  /** The attempt ended here (or was handed on): remembered from now for the window. */
  release(key: string, now = Date.now()): void {
    this.held.delete(key);
    this.released.delete(key);
    this.released.set(key, now);
    this.prune(now);
  }

  /** Gives the attempt up as if it was never taken (taking it failed: a repeat may take it). */
  forget(key: string): void {
    this.held.delete(key);
    this.released.delete(key);
  }

  /** Attempts held and remembered. */
  get size(): number {
    return this.held.size + this.released.size;
  }

  private windowMs(): number {
    return this.options.windowMs ?? RECENT_ATTEMPTS_WINDOW_MS;
  }

  private prune(now: number): void {
    const max = this.options.max ?? RECENT_ATTEMPTS_MAX;
    const since = now - this.windowMs();
    for (const [key, at] of this.released) {
      const full = this.released.size > max;
      if (at > since && !full) return;
      if (at > since && !this.warned) {
        this.warned = true;
        this.options.warn?.(
          `more than ${max} attempts ended within ${this.windowMs() / 60_000} min: the oldest are forgotten sooner, and a repeated delivery of one would run it again`,
        );
      }
      this.released.delete(key);
    }
  }
}
