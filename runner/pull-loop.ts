import type { DeliveryPayload } from "../shared/model/index.js";
import type { RunnerLog } from "./job.js";
import { sleep } from "../shared/client/index.js";
import type { Reporter } from "./reporter.js";

/** Idle polling starts this fast… */
export const PULL_MIN_DELAY_MS = 200;
/** …and slows down to this; any work resets it. */
export const PULL_MAX_DELAY_MS = 5_000;

/** What the pull loop needs from the runner: its identity, its free slots, and where leased work goes. */
export interface PullLoopOptions {
  reporter: Reporter;
  contextId: number;
  runnerId: number;
  /** Most jobs one lease asks for (the lease route takes at most 100). */
  batch: number;
  /** Free slots now. */
  freeSlots(): number;
  /** Resolves when a slot may have become free. */
  slotFreed(): Promise<void>;
  /** Parses one leased delivery; a string says what is wrong. */
  parse(raw: unknown): DeliveryPayload | string;
  /** Runs a leased delivery (acknowledging it first). */
  take(payload: DeliveryPayload): void;
  log: RunnerLog;
}

/** A running pull loop. */
export interface PullLoop {
  /** Stops leasing; resolves once no lease is in flight (what it brought is taken, since it is ours). */
  stop(): Promise<void>;
}

/**
 * The pull side: leases jobs through `POST /v1/contexts/<c>/runners/<r>/lease` with
 * `{max: free slots, at most batch}` (Upstash offers no blocking pop over REST, so this polls),
 * backing off exponentially while there is nothing to do and polling again at once after work came.
 */
export function startPullLoop(options: PullLoopOptions): PullLoop {
  const stopping = new AbortController();
  const stopped = new Promise<void>((resolve) =>
    stopping.signal.addEventListener("abort", () => resolve(), { once: true }),
  );
  const path = `/v1/contexts/${options.contextId}/runners/${options.runnerId}/lease`;
  const loop = (async () => {
    let delay = PULL_MIN_DELAY_MS;
    while (!stopping.signal.aborted) {
      const free = options.freeSlots();
      if (free <= 0) {
        await Promise.race([options.slotFreed(), stopped]);
        continue;
      }
      const leased = await lease(options, path, Math.min(free, options.batch));
      for (const payload of leased) options.take(payload);
      if (leased.length > 0) {
        delay = PULL_MIN_DELAY_MS;
        continue;
      }
      await sleep(delay, stopping.signal);
      delay = Math.min(delay * 2, PULL_MAX_DELAY_MS);
    }
  })();
  return {
    stop: async () => {
      stopping.abort();
      await loop;
    },
  };
}

async function lease(options: PullLoopOptions, path: string, max: number): Promise<DeliveryPayload[]> {
  // A short retry window: the loop itself retries, with its backoff.
  const outcome = await options.reporter.post(path, { max }, { retryForMs: 0 });
  if (!outcome.ok) {
    options.log.warn(`lease failed: ${outcome.detail}`);
    return [];
  }
  const deliveries = (outcome.body as { deliveries?: unknown } | undefined)?.deliveries;
  if (!Array.isArray(deliveries)) {
    options.log.warn("lease answered without a deliveries list");
    return [];
  }
  const out: DeliveryPayload[] = [];
  for (const raw of deliveries) {
    const payload = options.parse(raw);
    // Leased but unreadable: without its callbacks it cannot be reported on; its ack deadline will return it.
    if (typeof payload === "string") options.log.warn(`leased an unreadable delivery: ${payload}`);
    else out.push(payload);
  }
  return out;
}
