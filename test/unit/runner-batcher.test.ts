import http from "node:http";
import type { AddressInfo } from "node:net";
import { afterEach, describe, expect, it } from "vitest";
import { generateKeyPair, importPrivateKey, runnerKeyId } from "../../shared/auth/index.js";
import { ReportBatcher } from "../../runner/batcher.js";
import type { ReportTarget } from "../../runner/report-sink.js";
import { Reporter } from "../../runner/reporter.js";

/**
 * The reference runner's ReportBatcher against a real HTTP server started here that plays the
 * coordinator's answers by script: a batch failing on the way and sent again, one report of a
 * batch answered with a 5xx problem and sent again alone, a batch refused whole (sent again as
 * single webhooks), and a coordinator without the batch route. The coordinator's side of the
 * batch route is tested in test/worker/runner-reports.test.ts and test/e2e/runner-batch.test.ts.
 */

type Answer = { status: number; body: unknown };

let server: http.Server | undefined;
afterEach(() => new Promise<void>((resolve) => (server ? server.close(() => resolve()) : resolve())));

/** A server answering each request with the next of `script`'s answers; returns its URL and what it got. */
async function coordinator(script: (path: string, body: unknown) => Answer) {
  const got: { path: string; body: unknown }[] = [];
  server = http.createServer((req, res) => {
    let text = "";
    req.on("data", (c: Buffer) => (text += c.toString()));
    req.on("end", () => {
      const body: unknown = JSON.parse(text);
      const path = req.url ?? "";
      got.push({ path, body });
      const answer = script(path, body);
      res.writeHead(answer.status, { "content-type": "application/json" }).end(JSON.stringify(answer.body));
    });
  });
  await new Promise<void>((resolve) => server?.listen(0, "127.0.0.1", resolve));
  return { url: `http://127.0.0.1:${(server?.address() as AddressInfo).port}`, got };
}

async function batcherFor(url: string, warnings: string[] = []): Promise<ReportBatcher> {
  const jwk = await generateKeyPair();
  const reporter = new Reporter({
    baseUrl: url,
    signer: { keyid: runnerKeyId(1, 2), key: await importPrivateKey(jwk) },
    warn: (line) => warnings.push(line),
  });
  return new ReportBatcher({ reporter, contextId: 1, runnerId: 2, max: 10, warn: (line) => warnings.push(line) });
}

/** Where the reports of job `job` of flow 5 go (as the batcher reads a delivery's). */
function delivery(url: string, job: number): ReportTarget {
  const base = `${url}/v1/contexts/1/flows/5/jobs/${job}`;
  return {
    flow_id: 5,
    job_id: job,
    caller_id: 9,
    callbacks: { ack: `${base}/ack`, started: `${base}/started`, heartbeat: "", result: `${base}/result`, logs: "" },
  };
}

const problem = (status: number, kind: string) => ({ type: `/problems/${kind}`, title: kind, status });
const BATCH = "/v1/contexts/1/runners/2/reports";

describe("ReportBatcher", () => {
  it("sends reports in one request, again after a failed batch, and one answered with a 5xx again alone", async () => {
    let batches = 0;
    const { url, got } = await coordinator((_path, body) => {
      batches++;
      const n = (body as { reports: unknown[] }).reports.length;
      if (batches === 1) return { status: 503, body: problem(503, "storage-unavailable") };
      if (batches === 2)
        return {
          status: 200,
          body: {
            answers: [
              { outcome: "applied" },
              { problem: problem(503, "storage-unavailable") },
              { problem: problem(409, "stale-attempt") },
            ],
          },
        };
      return { status: 200, body: { answers: Array.from({ length: n }, () => ({ outcome: "duplicate" })) } };
    });
    const batcher = await batcherFor(url);
    const outcomes = await Promise.all([
      batcher.send(delivery(url, 1), "ack", { attempt: 1 }),
      batcher.send(delivery(url, 2), "started", { attempt: 1 }),
      batcher.send(delivery(url, 3), "result", { attempt: 1, status: "finished" }),
    ]);
    expect(outcomes.map((o) => [o.ok, o.status])).toEqual([
      [true, 200],
      [true, 200],
      [false, 409],
    ]);
    expect(outcomes[2]).toMatchObject({ stop: true });
    expect(
      got.map((g) => [g.path, (g.body as { reports: { job_id: number }[] }).reports.map((r) => r.job_id)]),
    ).toEqual([
      [BATCH, [1, 2, 3]],
      [BATCH, [1, 2, 3]],
      [BATCH, [2]],
    ]);
    expect(got[0]?.body).toEqual({
      reports: [
        { flow_id: 5, job_id: 1, event: "ack", body: { attempt: 1 } },
        { flow_id: 5, job_id: 2, event: "started", body: { attempt: 1 } },
        { flow_id: 5, job_id: 3, event: "result", body: { attempt: 1, status: "finished" } },
      ],
    });
    expect(batcher.requests).toBe(3);
  });

  it("sends a batch refused whole as single webhooks, and stays with batches", async () => {
    const { url, got } = await coordinator((path) =>
      path === BATCH
        ? { status: 400, body: { ...problem(400, "invalid-input"), field: "body.reports.1.body.status" } }
        : { status: 200, body: { outcome: "applied" } },
    );
    const warnings: string[] = [];
    const batcher = await batcherFor(url, warnings);
    const outcomes = await Promise.all([
      batcher.send(delivery(url, 1), "ack", { attempt: 1 }),
      batcher.send(delivery(url, 2), "result", { attempt: 1, status: "done" }),
    ]);
    expect(outcomes.every((o) => o.ok)).toBe(true);
    expect(got[0]?.path).toBe(BATCH);
    expect(
      got
        .slice(1)
        .map((g) => g.path)
        .sort(),
    ).toEqual(["/v1/contexts/1/flows/5/jobs/1/ack", "/v1/contexts/1/flows/5/jobs/2/result"]);
    expect(warnings.join("\n")).toMatch(/a batch of 2 reports was refused \(400 invalid-input/);
    await batcher.send(delivery(url, 3), "ack", { attempt: 1 });
    expect(got.at(-2)?.path).toBe(BATCH);
  });

  it("sends every report to its own webhook once the coordinator says it has no batch route", async () => {
    const { url, got } = await coordinator((path) =>
      path === BATCH ? { status: 404, body: problem(404, "no-route") } : { status: 200, body: { outcome: "applied" } },
    );
    const batcher = await batcherFor(url);
    expect((await batcher.send(delivery(url, 1), "ack", { attempt: 1 })).ok).toBe(true);
    expect((await batcher.send(delivery(url, 2), "ack", { attempt: 1 })).ok).toBe(true);
    expect(got.map((g) => g.path)).toEqual([
      BATCH,
      "/v1/contexts/1/flows/5/jobs/1/ack",
      "/v1/contexts/1/flows/5/jobs/2/ack",
    ]);
  });
});
