import type { Log } from "../shared/model/index.js";

/** A batch goes out when it has this many lines… */
export const LOG_BATCH_LINES = 50;
/** …or this many bytes of lines, so a report stays well inside a request's limit (1 MiB)… */
export const LOG_BATCH_BYTES = 256 * 1024;
/** …or this long after its first line, whichever comes first. */
export const LOG_BATCH_MS = 500;

/**
 * Groups a job's output lines into batches, so a chatty job costs one request per 50 lines or
 * per 500 ms instead of one per line. What is left when the job ends is taken with `rest()` and
 * sent along with the result.
 */
export class LogBatcher {
  private batch: Log[] = [];
  private bytes = 0;
  private timer: NodeJS.Timeout | undefined;

  constructor(private readonly send: (logs: Log[]) => void) {}

  /** Adds one line, stamped now (epoch seconds, fractional). */
  add(stream: Log["stream"], message: string): void {
    this.batch.push({ timestamp: Date.now() / 1000, stream, message });
    this.bytes += Buffer.byteLength(message) + 64;
    if (this.batch.length >= LOG_BATCH_LINES || this.bytes >= LOG_BATCH_BYTES) this.flush();
    else this.timer ??= setTimeout(() => this.flush(), LOG_BATCH_MS);
  }

  /** The lines not sent yet; the batcher stops its timer. */
  rest(): Log[] {
    clearTimeout(this.timer);
    this.timer = undefined;
    this.bytes = 0;
    return this.batch.splice(0);
  }

  private flush(): void {
    const lines = this.rest();
    if (lines.length > 0) this.send(lines);
  }
}
