import { signRequest } from "../../shared/auth/index.js";

/**
 * How the test runner (test-runner.ts) sends its reports: one signed webhook at a time, or in
 * batches to the runner's reports route, each retried on network errors and 5xx for `retryMs`
 * (at-least-once), printing how labelled ones were answered (`answered <label> <status> <code>`),
 * which tests read off its output.
 */

/** One report of a batch, and the label its answer is printed with. */
export interface BatchReport {
  entry: { flow_id: number; job_id: number; event: "ack" | "result"; body: Record<string, unknown> };
  label?: string;
}

/** Where and as whom reports go. */
export interface ReportTarget {
  base: string;
  contextId: number;
  runnerId: number;
  signer: Parameters<typeof signRequest>[1];
  retryMs: number;
}

/** The last segment of a problem's type, or an answer's outcome. */
function codeOf(text: string): string {
  try {
    const parsed = JSON.parse(text) as { type?: unknown; outcome?: unknown };
    if (typeof parsed.type === "string") return parsed.type.split("/").pop() ?? parsed.type;
    if (typeof parsed.outcome === "string") return parsed.outcome;
  } catch {
    // not JSON
  }
  return "-";
}

const backoff = (attempt: number) => new Promise((r) => setTimeout(r, Math.min(2_000, 100 * 2 ** attempt)));

export class TestReports {
  /** BATCH_RESULTS: results waiting for a batch, and the batches on the way (at most two). */
  private readonly waiting: (BatchReport & { sent: () => void })[] = [];
  private onTheWay = 0;
  /** Whether a send is due on the event loop's next turn. */
  private sendDue = false;

  constructor(private readonly target: ReportTarget) {}

  /** POSTs a signed webhook; with a `label`, prints how each try was answered. */
  async report(url: string, body: unknown, label?: string): Promise<void> {
    const { base, signer, retryMs } = this.target;
    const to = `${base}${new URL(url, base).pathname}`;
    const giveUpAt = Date.now() + retryMs;
    for (let attempt = 0; Date.now() < giveUpAt; attempt++) {
      try {
        const request = await signRequest(
          new Request(to, {
            method: "POST",
            body: JSON.stringify(body),
            headers: { "content-type": "application/json" },
          }),
          signer,
        );
        const res = await fetch(request);
        const text = await res.text();
        if (label) console.log(`answered ${label} ${res.status} ${codeOf(text)}`);
        if (res.status < 500) return;
      } catch (error) {
        if (label) console.log(`answered ${label} failed ${(error as Error).message}`);
      }
      await backoff(attempt);
    }
  }

  /** POSTs one batch of reports, signed, retrying the whole batch on network errors and 5xx. */
  async reportBatch(batch: BatchReport[]): Promise<void> {
    const { base, signer, retryMs, contextId, runnerId } = this.target;
    const path = `/v1/contexts/${contextId}/runners/${runnerId}/reports`;
    const giveUpAt = Date.now() + retryMs;
    for (let attempt = 0; Date.now() < giveUpAt; attempt++) {
      try {
        const body = JSON.stringify({ reports: batch.map((r) => r.entry) });
        const request = await signRequest(
          new Request(`${base}${path}`, { method: "POST", body, headers: { "content-type": "application/json" } }),
          signer,
        );
        const res = await fetch(request);
        const text = await res.text();
        if (res.status === 200) {
          printAnswers(batch, text);
          return;
        }
        if (res.status < 500) {
          console.log(`batch refused ${res.status} ${codeOf(text)}`);
          return;
        }
      } catch (error) {
        console.log(`batch failed ${(error as Error).message}`);
      }
      await backoff(attempt);
    }
  }

  /**
   * Sends a result in the next batch: with the results made in the same turn of the event loop,
   * on its next turn, when fewer than two batches are on the way, else with the results that came
   * meanwhile (up to 100 a request), so batches grow with the load and a lone result waits for
   * nothing, as the reference runner's batcher does.
   */
  queueResult(r: BatchReport): Promise<void> {
    return new Promise((resolve) => {
      this.waiting.push({ ...r, sent: resolve });
      if (this.sendDue) return;
      this.sendDue = true;
      setImmediate(() => {
        this.sendDue = false;
        this.sendResults();
      });
    });
  }

  private sendResults(): void {
    while (this.onTheWay < 2 && this.waiting.length > 0) {
      const batch = this.waiting.splice(0, 100);
      this.onTheWay++;
      void this.reportBatch(batch).finally(() => {
        this.onTheWay--;
        for (const r of batch) r.sent();
        this.sendResults();
      });
    }
  }
}

/** Prints how each labelled report of a batch was answered. */
function printAnswers(batch: BatchReport[], text: string): void {
  const { answers } = JSON.parse(text) as { answers: { outcome?: string; problem?: { type: string } }[] };
  batch.forEach((r, i) => {
    const answer = answers[i];
    const code = answer?.outcome ?? answer?.problem?.type.split("/").pop() ?? "-";
    if (r.label) console.log(`answered ${r.label} ${answer?.problem ? 409 : 200} ${code}`);
  });
}
