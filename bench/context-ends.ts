import type { CoordinatorClient } from "../shared/client/index.js";
import { now, nthTime } from "./measure.js";

/**
 * When each flow of a context ended, as the benchmark learns it from the context's event stream
 * (`flow.finished` or `flow.error`, timed as it arrives): for runs whose runner cannot tell when a
 * result was applied, since it answered with the result instead of reporting it. Later than the
 * commit by the stream's own hop (the flow's object, the context's feed, the SSE answer), never
 * earlier. The context's stream carries only `flow.*` events, so following it costs the Worker
 * next to nothing while the flows' job events are measured.
 */
export class ContextEnds {
  private readonly ends = new Map<number, number>();
  private readonly watchers = new Set<() => void>();
  private readonly stop = new AbortController();

  constructor(client: CoordinatorClient, contextId: number) {
    void (async () => {
      for await (const event of client.contextEvents(contextId, { signal: this.stop.signal })) {
        if (event.type !== "flow.finished" && event.type !== "flow.error") continue;
        this.ends.set(event.flow_id, now());
        this.watchers.forEach((w) => w());
      }
    })().catch((error: unknown) => {
      if (!this.stop.signal.aborted) console.error(`bench: the context's stream failed: ${String(error)}`);
    });
  }

  /** When `flow` ended (the benchmark's clock), once it has. */
  endOf(flow: number, timeoutMs: number): Promise<number> {
    return nthTime(
      this.watchers,
      () => {
        const at = this.ends.get(flow);
        return at === undefined ? [] : [at];
      },
      1,
      timeoutMs,
      () => `flow ${flow} did not end within ${timeoutMs} ms`,
    );
  }

  close(): void {
    this.stop.abort();
  }
}
