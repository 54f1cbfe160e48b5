import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { runnerKeyId } from "../../shared/auth/index.js";
import type { RunnerEventName, RunnerReport, RunnerReportAnswer } from "../../shared/client/index.js";
import type { DeliveryPayload } from "../../shared/model/index.js";
import { BASE, failure, signed, testWorker } from "./harness.js";
import { jobName, PullRunner } from "./pull-runner.js";

// The batched runner webhook (POST /v1/contexts/{c}/runners/{r}/reports) in the real Worker over
// real Redis: many reports on jobs of several flows (and one outside any flow) in one signed
// request, each applied once, each answered on its own.

const w = testWorker("runner-reports");
afterAll(() => w.cleanup());

let admin: Awaited<ReturnType<typeof w.newActor>>;
beforeAll(async () => {
  admin = await w.newActor();
});

const sh = (name: string) => ({ name, script: `echo ${name}`, script_type: "sh" as const });

/** A batch entry on a delivery's job. */
function entry(d: DeliveryPayload, event: RunnerEventName, body: Record<string, unknown> = {}): RunnerReport {
  const job = d.flow_id > 0 ? { flow_id: d.flow_id } : { caller_id: d.message.caller_id };
  return { ...job, job_id: d.job_id, event, body: { attempt: d.attempt, ...body } };
}

/** ack, started and a finished result of each delivery, its job's name as its result. */
function runAll(deliveries: DeliveryPayload[]): RunnerReport[] {
  return deliveries.flatMap((d) => [
    entry(d, "ack"),
    entry(d, "started"),
    entry(d, "result", { status: "finished", result: { name: jobName(d) } }),
  ]);
}

const outcomes = (answers: RunnerReportAnswer[]) =>
  answers.map((a) => ("outcome" in a ? a.outcome : a.problem.type.split("/").pop()));

describe("a batch of reports", () => {
  it("applies reports on jobs of several flows and one outside any flow, each once", async () => {
    const ctx = (await admin.client.createContext()).id;
    const runner = await PullRunner.register(w, admin.client, ctx);
    const flows = await Promise.all(
      [1, 2, 3].map((f) => admin.client.submitFlow(ctx, { start: true, jobs: [sh(`f${f}a`), sh(`f${f}b`)] })),
    );
    const lone = (await admin.client.request("POST", `/v1/contexts/${ctx}/jobs`, { job: sh("lone"), start: true })) as {
      job: { id: number; caller_id: number };
    };
    const deliveries = await runner.leaseSome(7);
    expect(deliveries).toHaveLength(7);
    const reports = runAll(deliveries);

    const first = await runner.client.reportBatch(ctx, runner.id, reports);
    expect(outcomes(first)).toEqual(reports.map(() => "applied"));
    for (const flow of flows) {
      const view = await admin.client.loadFlow(ctx, flow.id);
      expect(view.status).toBe("finished");
      expect(view.jobs.map((j) => [j.status, j.attempt])).toEqual([
        ["finished", 1],
        ["finished", 1],
      ]);
    }
    const job = (await admin.client.request(
      "GET",
      `/v1/contexts/${ctx}/jobs/${lone.job.caller_id}/${lone.job.id}`,
    )) as {
      status: string;
    };
    expect(job.status).toBe("finished");

    // The same results again, signed anew (as a runner retries a batch whose answer it lost).
    const results = reports.filter((r) => r.event === "result");
    const again = await runner.client.reportBatch(ctx, runner.id, results);
    expect(outcomes(again)).toEqual(results.map(() => "duplicate"));
    // An ack or a start of an attempt that ended answers as its webhook does: 409, and changes nothing.
    const late = await runner.client.reportBatch(ctx, runner.id, reports.slice(0, 2));
    expect(outcomes(late)).toEqual(["stale-attempt", "stale-attempt"]);
  });

  it("answers each report on its own: a stale attempt or an unknown job fails only itself", async () => {
    const ctx = (await admin.client.createContext()).id;
    const runner = await PullRunner.register(w, admin.client, ctx);
    const flow = await admin.client.submitFlow(ctx, { start: true, jobs: [sh("a"), sh("b")] });
    const [a, b] = await runner.leaseSome(2);
    if (!a || !b) throw new Error("nothing leased");
    const answers = await runner.client.reportBatch(ctx, runner.id, [
      entry(a, "ack"),
      { ...entry(b, "ack"), body: { attempt: 2 } },
      { flow_id: flow.id, job_id: 999, event: "ack", body: { attempt: 1 } },
      { flow_id: flow.id + 1000, job_id: 1, event: "ack", body: { attempt: 1 } },
      entry(b, "ack"),
      entry(a, "result", { status: "finished" }),
      entry(b, "result", { status: "error", error: "boom" }),
    ]);
    expect(outcomes(answers)).toEqual([
      "applied",
      "stale-attempt",
      "not-found",
      "not-found",
      "applied",
      "applied",
      "applied",
    ]);
    expect(answers[1]).toMatchObject({ problem: { status: 409 } });
    const view = await admin.client.loadFlow(ctx, flow.id);
    expect(view.jobs.map((j) => [j.key, j.status])).toEqual([
      ["a", "finished"],
      ["b", "error"],
    ]);
  });

  it("refuses a replayed request's heartbeats and logs, and finds its results already taken", async () => {
    const ctx = (await admin.client.createContext()).id;
    const runner = await PullRunner.register(w, admin.client, ctx);
    await admin.client.submitFlow(ctx, { start: true, jobs: [sh("a"), sh("b")] });
    const [a, b] = await runner.leaseSome(2);
    if (!a || !b) throw new Error("nothing leased");
    const line = { timestamp: 1, stream: "stdout", message: "hello" };
    const body = {
      reports: [
        entry(a, "ack"),
        entry(a, "started"),
        entry(a, "heartbeat"),
        entry(a, "logs", { logs: [line] }),
        entry(b, "ack"),
        entry(b, "result", { status: "finished" }),
      ],
    };
    const request = await signed(
      "POST",
      `/v1/contexts/${ctx}/runners/${runner.id}/reports`,
      runner.jwk,
      keyid(runner),
      body,
    );
    const replay = request.clone();
    const first = (await (await w.fetch(request)).json()) as { answers: RunnerReportAnswer[] };
    expect(outcomes(first.answers)).toEqual(["applied", "applied", "applied", "applied", "applied", "applied"]);
    const response = await w.fetch(replay);
    expect(response.status).toBe(200);
    const second = (await response.json()) as { answers: RunnerReportAnswer[] };
    expect(outcomes(second.answers)).toEqual([
      "duplicate",
      "duplicate",
      "nonce-replayed",
      "nonce-replayed",
      "stale-attempt", // b's attempt ended: its ack changes nothing
      "duplicate",
    ]);
  });

  it("refuses an invalid body whole, naming the report at fault", async () => {
    const ctx = (await admin.client.createContext()).id;
    const runner = await PullRunner.register(w, admin.client, ctx);
    const ok = { flow_id: 1, job_id: 1, event: "ack", body: { attempt: 1 } } as const;
    const bad = async (reports: unknown[]) =>
      (await failure(runner.client.request("POST", `/v1/contexts/${ctx}/runners/${runner.id}/reports`, { reports })))
        .problem;
    expect(await bad([ok, ok, ok, { ...ok, event: "result", body: { attempt: 1, status: "done" } }])).toMatchObject({
      status: 400,
      field: "body.reports.3.body.status",
    });
    expect(await bad([{ ...ok, caller_id: 3 }])).toMatchObject({ field: "body.reports.0.flow_id" });
    expect(await bad([{ ...ok, event: "finish" }])).toMatchObject({ field: "body.reports.0.event" });
    expect(await bad([])).toMatchObject({ field: "body.reports" });
    expect(await bad(Array.from({ length: 101 }, () => ok))).toMatchObject({ field: "body.reports" });
  });

  it("is in the OpenAPI document", async () => {
    const doc = (await (await w.fetch(new Request(`${BASE}/openapi.json`))).json()) as {
      paths: Record<string, Record<string, { responses: Record<string, unknown> }>>;
    };
    const route = doc.paths["/v1/contexts/{contextId}/runners/{runnerId}/reports"]?.post;
    expect(Object.keys(route?.responses ?? {})).toContain("200");
  });

  it("takes reports only from the runner the path names", async () => {
    const ctx = (await admin.client.createContext()).id;
    const runner = await PullRunner.register(w, admin.client, ctx);
    const other = await PullRunner.register(w, admin.client, ctx);
    const reports: RunnerReport[] = [{ flow_id: 1, job_id: 1, event: "ack", body: { attempt: 1 } }];
    expect((await failure(other.client.reportBatch(ctx, runner.id, reports))).status).toBe(403);
    expect((await failure(admin.client.reportBatch(ctx, runner.id, reports))).status).toBe(403);
  });
});

function keyid(runner: PullRunner): string {
  return runnerKeyId(runner.contextId, runner.id);
}
