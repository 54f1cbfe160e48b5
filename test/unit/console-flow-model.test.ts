import { describe, expect, it } from "vitest";
import { applyEvent, Unread } from "../../console/src/pages/flow-events.js";
import { Attempts } from "../../console/src/timeline-model.js";
import type { FlowStreamEvent, FlowView, JobView } from "../../shared/model/index.js";

// The console's flow page without a browser: what its timeline knows of each attempt, from
// events in any order and from the view, and how a read of the view that answers late is brought
// up to the events the page already applied (docs/console.md, "Plain statuses", "The flow's jobs").

const T = 1_700_000_000_000;

function event(seq: number, type: FlowStreamEvent["type"], fields: Partial<FlowStreamEvent> = {}): FlowStreamEvent {
  return { seq, type, at_ms: T + seq * 100, context_id: 1, flow_id: 1, trace_id: "t", status: "started", ...fields };
}

function job(fields: Partial<JobView> = {}): JobView {
  return { id: 1, key: "a", kind: "script", status: "waiting_for_prerequisites", attempt: 0, depends: [], ...fields };
}

function view(jobs: JobView[], last_seq: number): FlowView {
  return {
    id: 1,
    context_id: 1,
    caller_id: 1,
    status: "started",
    run: 1,
    env_vars: {},
    result: {},
    trace_id: "t",
    priority: 0,
    progress: { total: 0, dispatched: 0, waiting_for_prerequisites: 0, started: 0, finished: 0, error: 0, skipped: 0 },
    jobs,
    last_seq,
  };
}

/** A retried job's events: attempt 1 fails into a backoff, attempt 2 finishes. */
const retried = [
  event(1, "job.ready", { job_id: 1, attempt: 1, status: "dispatched" }),
  event(2, "job.delivered", { job_id: 1, attempt: 1, status: "dispatched" }),
  event(3, "job.started", { job_id: 1, attempt: 1 }),
  event(4, "job.retry_scheduled", { job_id: 1, attempt: 1, status: "dispatched", error: "exit code 2" }),
  event(5, "job.ready", { job_id: 1, attempt: 2, status: "dispatched" }),
  event(6, "job.started", { job_id: 1, attempt: 2 }),
  event(7, "job.finished", { job_id: 1, attempt: 2, status: "finished" }),
];

describe("the timeline's attempts", () => {
  it("draws each attempt from its events, whatever order they come in", () => {
    for (const order of [retried, [...retried].reverse(), [retried[6], retried[0], retried[3], ...retried]]) {
      const attempts = new Attempts();
      for (const e of order) if (e) attempts.apply(e);
      expect(attempts.of(1)).toEqual([
        {
          attempt: 1,
          run: 1,
          queued: T + 100,
          delivered: T + 200,
          started: T + 300,
          ended: T + 400,
          word: "failed",
          why: "exit code 2",
          seq: 4,
        },
        { attempt: 2, run: 1, queued: T + 500, started: T + 600, ended: T + 700, word: "finished", seq: 7 },
      ]);
      expect(attempts.span()).toEqual({ from: T + 100, to: T + 700 });
    }
  });

  it("takes the view's latest attempt, never over an end an event told", () => {
    const attempts = new Attempts();
    for (const e of retried.slice(0, 4)) attempts.apply(e);
    // Waiting out the backoff, the view's job is at attempt 1 still, dispatched: that attempt failed.
    const backoff = job({
      status: "dispatched",
      attempt: 1,
      error: "exit code 2",
      queued_at_ms: T + 100,
      waiting: { reason: "backoff", detail: "attempt 1 failed" },
    });
    attempts.seed(view([backoff], 9));
    expect(attempts.of(1)[0]).toMatchObject({ word: "failed", ended: T + 400 });
    // A job first seen in a view (the page opened late): its latest attempt from the view alone.
    const fresh = new Attempts();
    const running = job({ status: "started", attempt: 3, queued_at_ms: T, started_at_ms: T + 50 });
    fresh.seed(view([running, job({ id: 2, key: "b" })], 20));
    expect(fresh.of(1)).toEqual([{ attempt: 3, run: 1, queued: T, started: T + 50, word: "running", seq: 20 }]);
    expect(fresh.of(2)).toEqual([]);
  });

  it("says a wait or a sleep under way is waiting, and a job never run has no bar", () => {
    const attempts = new Attempts();
    attempts.apply(event(1, "job.wait_started", { job_id: 1, attempt: 1 }));
    attempts.apply(
      event(2, "job.error", { job_id: 2, attempt: 0, status: "error", error: "not run: dependency a failed" }),
    );
    expect(attempts.of(1)[0]).toMatchObject({ word: "waiting", started: T + 100 });
    expect(attempts.of(2)).toEqual([]);
  });
});

describe("a read of the view that answers late", () => {
  it("is brought up to the events the page applied since, and drops those it has", () => {
    const unread = new Unread();
    const seen = [
      event(5, "job.started", { job_id: 1, attempt: 1 }),
      event(6, "job.finished", { job_id: 1, attempt: 1, status: "finished", result: { ok: "1" } }),
      event(7, "flow.finished", { status: "finished" }),
    ];
    for (const e of seen) unread.keep(e);
    // Read when job a had just started: it would take the page back to a running job.
    const late = view([job({ status: "started", attempt: 1, started_at_ms: T + 500 })], 5);
    unread.catchUp(late);
    expect(late.jobs[0]).toMatchObject({
      status: "finished",
      result: { ok: "1" },
      ended_at_ms: T + 600,
      duration_ms: 100,
    });
    expect([late.status, late.ended_at_ms, late.last_seq]).toEqual(["finished", T + 700, 7]);
    // A newer read has them all: nothing is applied twice.
    const newer = view([job({ status: "finished", attempt: 1 })], 7);
    unread.catchUp(newer);
    expect(newer.jobs[0]?.ended_at_ms).toBeUndefined();
  });

  it("applies a job's times as the view has them: a new attempt forgets the last one's", () => {
    const flow = view([job({ status: "started", attempt: 1, started_at_ms: T, ended_at_ms: T + 1 })], 1);
    applyEvent(flow, event(2, "job.ready", { job_id: 1, attempt: 2, status: "dispatched" }));
    expect(flow.jobs[0]).toMatchObject({ attempt: 2, queued_at_ms: T + 200 });
    expect(flow.jobs[0]?.started_at_ms).toBeUndefined();
    applyEvent(flow, event(3, "job.delivered", { job_id: 1, attempt: 2, status: "dispatched" }));
    applyEvent(flow, event(4, "job.started", { job_id: 1, attempt: 2 }));
    expect(flow.jobs[0]?.started_at_ms).toBe(T + 400);
  });
});
