import type { Readable } from "node:stream";
import { now, nthTime } from "./measure.js";

/** Results applied, and when each job began, read off the test runner's stdout. */
export class RunnerTap {
  private partial = "";
  private lastDelivery = 0;
  private readonly starts = new Map<string, number>();
  private readonly applied = new Map<number, number[]>();
  private readonly watchers = new Set<() => void>();
  /** Result reports not answered `200 applied` (each try). */
  readonly anomalies: string[] = [];

  constructor(stdout: Readable) {
    stdout.on("data", (chunk: Buffer) => this.take(chunk.toString(), now()));
  }

  private take(text: string, at: number): void {
    const lines = (this.partial + text).split("\n");
    this.partial = lines.pop() ?? "";
    for (const line of lines) {
      let m = /^delivery (\d+) load/.exec(line);
      if (m) this.lastDelivery = Number(m[1]);
      // The runner prints `ran` right after `delivery`, in the same turn: they pair up.
      m = /^ran (\S+) flow (\d+) attempt/.exec(line);
      if (m) this.starts.set(`${m[2]}:${m[1]}`, this.lastDelivery);
      m = /^answered result (\S+) flow (\d+) attempt \d+ (\S+) (\S+)/.exec(line);
      if (m) {
        if (m[3] === "200" && m[4] === "applied") {
          const flow = Number(m[2]);
          this.applied.set(flow, [...(this.applied.get(flow) ?? []), at]);
        } else this.anomalies.push(line);
      }
    }
    this.watchers.forEach((w) => w());
  }

  /** When the `n`-th result of `flow` was applied (epoch ms), once it has been. */
  resultsOf(flow: number, n: number, timeoutMs: number): Promise<number> {
    return nthTime(
      this.watchers,
      () => this.applied.get(flow) ?? [],
      n,
      timeoutMs,
      (count) => `flow ${flow}: ${count} of ${n} results in ${timeoutMs} ms`,
    );
  }

  /** When job `job` of `flow` began at the runner (epoch ms, the runner's clock). */
  startOf(flow: number, job: string): number | undefined {
    return this.starts.get(`${flow}:${job}`);
  }
}
