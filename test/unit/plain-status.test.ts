import { describe, expect, it } from "vitest";
import { plainClass, plainFlowStatus, plainJobStatus, plainText } from "../../shared/model/plain-status.js";

describe("plain statuses", () => {
  it("words a job by its API status, attempt and error", () => {
    expect(plainJobStatus({ status: "dispatched", attempt: 0 })).toEqual({ word: "queued" });
    expect(plainJobStatus({ status: "waiting_for_prerequisites", attempt: 0 })).toEqual({ word: "waiting" });
    expect(plainJobStatus({ status: "started", attempt: 1 })).toEqual({ word: "running" });
    expect(plainJobStatus({ status: "started", attempt: 1, kind: "wait" })).toEqual({ word: "waiting" });
    expect(plainJobStatus({ status: "started", attempt: 1, kind: "sleep" }).word).toBe("waiting");
    expect(plainJobStatus({ status: "started", attempt: 1, kind: "flow" }).word).toBe("running");
    expect(plainJobStatus({ status: "finished", attempt: 1 })).toEqual({ word: "finished" });
    expect(plainJobStatus({ status: "skipped", attempt: 0, skip_reason: "when was false" })).toEqual({
      word: "not run",
      why: "when was false",
    });
    const never = { status: "error", attempt: 0, error: "not run: dependency a failed" } as const;
    expect(plainJobStatus(never)).toEqual({ word: "not run", why: "not run: dependency a failed" });
    expect(plainJobStatus({ status: "error", attempt: 2, error: "exit 1" })).toEqual({ word: "failed", why: "exit 1" });
    const cancelled = { status: "error", attempt: 1, error: "cancelled: by an admin" } as const;
    expect(plainJobStatus(cancelled)).toEqual({ word: "cancelled", why: "cancelled: by an admin" });
    expect(plainJobStatus({ ...cancelled, attempt: 0 }).word).toBe("cancelled");
  });

  it("words a flow, telling a cancel from a failure by the flow's own error", () => {
    expect(plainFlowStatus({ status: "dispatched" }).word).toBe("created");
    expect(plainFlowStatus({ status: "started" }).word).toBe("running");
    expect(plainFlowStatus({ status: "error", error: { job: 0, reason: "cancelled: by an admin" } })).toEqual({
      word: "cancelled",
      why: "cancelled: by an admin",
    });
    expect(plainFlowStatus({ status: "error", error: { job: 0, reason: "the flow ran past its deadline" } }).word).toBe(
      "failed",
    );
    expect(plainFlowStatus({ status: "error", error: { job: 3, reason: "cancelled: x" } }).word).toBe("failed");
    expect(plainFlowStatus({ status: "compensation_failed" }).word).toBe("compensation failed");
    expect(plainClass("not run")).toBe("not-run");
  });

  it("says the words as one text, a why that opens with its word not said twice", () => {
    expect(plainText({ word: "running" })).toBe("running");
    expect(plainText({ word: "failed", why: "exit code 3" })).toBe("failed: exit code 3");
    expect(plainText({ word: "not run", why: "not run: dependency a failed" })).toBe("not run: dependency a failed");
    expect(plainText({ word: "cancelled", why: "cancelled: by an admin" })).toBe("cancelled: by an admin");
    expect(plainText({ word: "not run", why: "when is false" })).toBe("not run: when is false");
  });
});
