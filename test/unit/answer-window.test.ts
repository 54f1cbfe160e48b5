import { describe, expect, it } from "vitest";
import { AnswerWindow, ToldEnds } from "../../runner/answer-window.js";
import type { ReportSink, ReportTarget } from "../../runner/report-sink.js";

/**
 * The reference runner's answer held open for a job's end (`--answer-within`): the result goes
 * into the answer while the window is open, through the runner's own sink after it closed, and
 * never both, unless the coordinator hung up before the answer went out. What reaches the sink
 * is recorded (the transport itself is tested end to end in runner-batch.test.ts and
 * faults-slow-runner.test.ts).
 */

const target = { flow_id: 1, caller_id: 1, job_id: 1, callbacks: {} } as unknown as ReportTarget;

function recording(): { sink: ReportSink; sent: string[] } {
  const sent: string[] = [];
  return {
    sent,
    sink: {
      send: (_target, event) => {
        sent.push(event);
        return Promise.resolve({ ok: true, status: 200, body: null });
      },
    },
  };
}

describe("the answer window", () => {
  it("puts a result that comes in time into the answer, and passes the other reports on", async () => {
    const { sink, sent } = recording();
    const window = new AnswerWindow(1_000);
    const told: unknown[] = [];
    const through = window.sink(sink, (report) => told.push(report));
    await through.send(target, "logs", { attempt: 1, logs: [] });
    const outcome = await through.send(target, "result", {
      attempt: 1,
      status: "finished",
      result: { a: "1" },
      logs: [],
    });
    expect(outcome).toMatchObject({ ok: true });
    expect(await window.ending).toEqual({ status: "finished", result: { a: "1" }, logs: [] });
    expect(told).toEqual([{ status: "finished", result: { a: "1" }, logs: [] }]);
    expect(sent).toEqual(["logs"]);
  });

  it("answers without a result once the time ran out, and the result then goes as a report", async () => {
    const { sink, sent } = recording();
    const window = new AnswerWindow(20);
    const through = window.sink(sink, () => expect.unreachable("told after the window closed"));
    expect(await window.ending).toBeUndefined();
    await through.send(target, "result", { attempt: 1, status: "error", error: "late", logs: [] });
    expect(sent).toEqual(["result"]);
  });

  it("sends the result as a report when the coordinator hung up before the answer went out", async () => {
    // Hung up while the job ran: the window closes, and the result goes as a report when it comes.
    const early = recording();
    const open = new AnswerWindow(1_000);
    const throughOpen = open.sink(early.sink, () => expect.unreachable("told after the coordinator hung up"));
    open.unanswered();
    expect(await open.ending).toBeUndefined();
    await throughOpen.send(target, "result", { attempt: 1, status: "finished", result: {}, logs: [] });
    expect(early.sent).toEqual(["result"]);

    // Hung up after the result went into an answer not yet written: it goes as a report at once, once.
    const late = recording();
    const closed = new AnswerWindow(1_000);
    const throughClosed = closed.sink(late.sink, () => undefined);
    await throughClosed.send(target, "result", { attempt: 1, status: "finished", result: {}, logs: [] });
    expect(late.sent).toEqual([]);
    closed.unanswered();
    closed.unanswered();
    expect(late.sent).toEqual(["result"]);
  });

  it("remembers the latest ends told, to answer a delivery sent again the same way", () => {
    const told = new ToldEnds();
    for (let i = 0; i < 1_001; i++) told.remember(`k${i}`, { status: "finished", result: {}, logs: [] });
    expect(told.get("k0")).toBeUndefined();
    expect(told.get("k1000")).toEqual({ status: "finished", result: {}, logs: [] });
  });
});
