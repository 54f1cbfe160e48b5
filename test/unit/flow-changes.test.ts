import { describe, expect, it } from "vitest";
import { catchUpChanges, changesOf, type FlowChange, type Published } from "../../shared/flow/changes.js";
import type { FlowEvent, FlowState } from "../../shared/flow/index.js";
import { Driver, flowOf, jobIn, T } from "./flow-sim.js";

// The flow's event stream as the pure machine's transitions tell it: which events each step
// makes, in which order, and how a subscriber who missed transitions is caught up.

/** A driver that also records the stream changes of every event it sends. */
class Recorder extends Driver {
  readonly changes: FlowChange[] = [];
  override send(event: FlowEvent) {
    const before = this.state;
    const t = super.send(event);
    this.changes.push(...changesOf(before, t, event));
    return t;
  }
  types(): string[] {
    return this.changes.map((c) => `${c.type}${c.job_id ? `:${c.job_id}` : ""}`);
  }
}

function diamond(retries = 0): Recorder {
  return new Recorder(
    flowOf([
      jobIn({ name: "a", retries }),
      jobIn({ name: "b", depends: ["a"] }),
      jobIn({ name: "c", depends: ["a"] }),
      jobIn({ name: "d", depends: ["b", "c"] }),
    ]),
  );
}

describe("changesOf", () => {
  it("tells a wait or a sleep started after the end of the job that let it start, and a skip with why", () => {
    const none = { script: undefined, script_type: undefined };
    const d = new Recorder(
      flowOf([
        jobIn({ name: "a" }),
        jobIn({ name: "nap", depends: ["a"], ...none, sleep: 5 }),
        jobIn({ name: "pay", depends: ["a"], ...none, wait: { event: "paid", key: "${DEP_A_OUT}" } }),
        jobIn({ name: "never", depends: ["a"], when: "false" }),
      ]),
    );
    d.send({ type: "start", at: T });
    d.changes.length = 0;
    d.run(100, { at: T + 10 });
    expect(d.types().slice(-4)).toEqual([
      "job.finished:100",
      "job.sleep_started:101",
      "job.wait_started:102",
      "job.skipped:103",
    ]);
    expect(d.changes.find((c) => c.type === "job.wait_started")).toMatchObject({
      event_name: "paid",
      event_key: "100",
    });
    expect(d.changes.find((c) => c.type === "job.skipped")).toMatchObject({
      status: "skipped",
      reason: "when is false: false",
    });
  });

  it("tells a diamond's run: start, each job's steps, the end", () => {
    const d = diamond();
    d.send({ type: "start", at: T });
    expect(d.types()).toEqual([
      "flow.started",
      "job.waiting:101",
      "job.waiting:102",
      "job.waiting:103",
      "job.ready:100",
    ]);
    d.changes.length = 0;
    d.run(100);
    expect(d.types()).toEqual([
      "job.dispatched:100",
      "job.delivered:100",
      "job.started:100",
      "job.finished:100",
      "job.ready:101",
      "job.ready:102",
    ]);
    expect(d.changes.find((c) => c.type === "job.finished")).toMatchObject({ result: { out: "100" }, runner_id: 1 });
    d.run(101);
    d.run(102);
    d.changes.length = 0;
    d.run(103);
    expect(d.types().slice(-2)).toEqual(["job.finished:103", "flow.finished"]);
    expect(d.changes.at(-1)?.progress).toEqual({
      dispatched: 0,
      waiting_for_prerequisites: 0,
      started: 0,
      finished: 4,
      error: 0,
      skipped: 0,
    });
  });

  it("tells a failure: a retry scheduled, then the error, the dead letter and the flow's error", () => {
    const d = diamond(1);
    d.send({ type: "start", at: T });
    d.changes.length = 0;
    d.run(100, { error: "exit 1" });
    const retry = d.changes.find((c) => c.type === "job.retry_scheduled");
    expect(retry).toMatchObject({ job_id: 100, attempt: 1, error: "exit 1" });
    expect(retry?.retry_at_ms).toBe(d.job(100).deadline?.at);
    d.changes.length = 0;
    d.send({ type: "deadline", job: 100, attempt: 1, kind: "retry", at: d.job(100).deadline?.at ?? 0 });
    expect(d.types()).toEqual(["job.ready:100"]);
    d.changes.length = 0;
    d.run(100, { error: "exit 2" });
    expect(d.types()).toEqual(expect.arrayContaining(["job.error:100", "job.dead_lettered:100", "flow.error"]));
    expect(d.types().at(-1)).toBe("flow.error");
  });

  it("tells a cancel once as flow.cancelled, and a refused event not at all", () => {
    const d = diamond();
    d.send({ type: "start", at: T });
    d.changes.length = 0;
    d.send({ type: "heartbeat", job: 100, attempt: 9, runner: 1, at: T + 1 });
    expect(d.changes).toEqual([]);
    d.send({ type: "cancel", reason: "enough", at: T + 2 });
    expect(d.types()[0]).toBe("flow.cancelled");
    expect(d.types().filter((t) => t.startsWith("flow."))).toEqual(["flow.cancelled"]);
    expect(d.changes[0]).toMatchObject({ reason: "enough", status: "error" });
  });
});

describe("catchUpChanges", () => {
  it("tells each job whose status or attempt moved since it was published, and the flow last", () => {
    const d = diamond();
    d.send({ type: "start", at: T });
    const told = new Map<number, Published>([
      [100, { status: "dispatched", attempt: 1 }],
      [101, { status: "waiting_for_prerequisites", attempt: 0 }],
    ]);
    d.run(100);
    d.run(101);
    const state: FlowState = d.state;
    const caught = catchUpChanges(state, told, "started", T + 5);
    expect(caught.map((c) => `${c.type}:${c.job_id}`)).toEqual([
      "job.finished:100",
      "job.finished:101",
      "job.ready:102",
      "job.waiting:103",
    ]);
    expect(caught[0]?.result).toEqual({ out: "100" });
    expect(catchUpChanges(state, told, "dispatched", T + 5).at(-1)?.type).toBe("flow.started");
  });

  it("tells a running wait or sleep by its start, and a skip with why (a subscriber that missed them learns what they wait for)", () => {
    const none = { script: undefined, script_type: undefined };
    const d = new Recorder(
      flowOf([
        jobIn({ name: "pay", ...none, wait: { event: "paid", key: "k" } }),
        jobIn({ name: "nap", ...none, sleep: 5 }),
        jobIn({ name: "never", when: "false" }),
      ]),
    );
    d.send({ type: "start", at: T });
    const caught = catchUpChanges(d.state, new Map(), "started", T + 1);
    expect(caught.map((c) => c.type)).toEqual(["job.wait_started", "job.sleep_started", "job.skipped"]);
    expect(caught[0]).toMatchObject({ event_name: "paid", event_key: "k", until_ms: T + 86_400_000 });
    expect(caught[1]).toMatchObject({ until_ms: T + 5_000 });
    expect(caught[2]).toMatchObject({ reason: "when is false: false" });
  });

  it("says nothing when subscribers are up to date", () => {
    const state = flowOf([jobIn({ name: "a" })]);
    expect(catchUpChanges(state, new Map(), "dispatched", T)).toEqual([]);
  });
});
