import { sleep } from "../../shared/client/index.js";

const INITIAL_DELAY_MS = 250;
const MAX_DELAY_MS = 8_000;

/**
 * Runs `step` until it succeeds, waiting 250 ms between tries and doubling up to 8 s, for at
 * most `forMs` (NATS restarting, a cluster electing a leader); then throws the last error.
 */
export async function retryFor<T>(step: () => Promise<T>, forMs: number): Promise<T> {
  const deadline = Date.now() + forMs;
  for (let delay = INITIAL_DELAY_MS; ; delay = Math.min(delay * 2, MAX_DELAY_MS)) {
    try {
      return await step();
    } catch (error) {
      if (Date.now() + delay > deadline) throw error;
      await sleep(delay);
    }
  }
}
