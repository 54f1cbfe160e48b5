import { describe, expect, it } from "vitest";
import { contextEventLine } from "../../cli/context-watch.js";
import { endLine, flowRows, progressOf } from "../../cli/flow-text.js";
import { nameOfFile } from "../../cli/flowfile.js";
import type { ContextStreamEvent, Flow, FlowView } from "../../shared/model/index.js";

// What flowc prints of a flow's identity and status, in plain words (docs/flows.md): the default
// name a flow file gives, a list's row, a watch's last line, a context watch's line.

const flow = (extra: Partial<Flow> = {}): Flow => ({
  id: 3,
  caller_id: 1,
  context_id: 1,
  jobs: [10, 11, 12, 13],
  env_vars: {},
  created_at: 1_764_400_000,
  updated_at: 1_764_400_000,
  status: "started",
  ...extra,
});

describe("a flow file's name", () => {
  it("is the file's without its folder and extension, one line, at most 128 characters", () => {
    expect(nameOfFile("/work/examples/diamond.yaml")).toBe("diamond");
    expect(nameOfFile("nightly report.YML")).toBe("nightly report");
    expect(nameOfFile("flow.json")).toBe("flow");
    expect(nameOfFile("notes.txt")).toBe("notes.txt");
    expect(nameOfFile(`${"x".repeat(200)}.yaml`)).toHaveLength(128);
    expect(nameOfFile(".yaml")).toBeUndefined();
  });
});

describe("flow list's rows", () => {
  it("show the name, the plain status, the trigger, the priority and the progress, a cancel's reason once", () => {
    const progress = {
      total: 4,
      dispatched: 0,
      waiting_for_prerequisites: 1,
      started: 1,
      finished: 2,
      error: 0,
      skipped: 0,
    };
    const rows = flowRows([
      flow({ name: "nightly", priority: 5, schedule_id: 2, progress }),
      flow({ id: 4, status: "error", error: { job: 0, reason: "cancelled: not today" }, ended_at: 1_764_400_060 }),
    ]);
    expect(rows[0]).toMatch(/^ID +NAME +STATUS +TRIGGER +PRIORITY +PROGRESS +CREATED +ENDED +WHY$/);
    expect(rows[1]).toMatch(/^3 +nightly +running +schedule 2 +5 +2\/4 +\S+Z +-$/);
    expect(rows[2]).toMatch(/^4 +- +cancelled +manual +0 +-\/4 +\S+Z +\S+Z +not today$/);
    expect(progressOf(flow({ progress: { ...progress, skipped: 1 } }))).toBe("3/4");
  });
});

describe("a watch's last line", () => {
  const view = (extra: Partial<FlowView>): FlowView =>
    ({ id: 3, jobs: [{ id: 10, key: "verify" }], ...extra }) as unknown as FlowView;
  it("says failed with the job at fault, cancelled with the cancel's reason, failed with the flow's own reason", () => {
    expect(endLine(view({ status: "error", error: { job: 10, reason: "exit code 3" } }), " in 9 s")).toBe(
      "flow 3 failed in 9 s: job verify failed: exit code 3",
    );
    expect(endLine(view({ status: "error", error: { job: 0, reason: "cancelled: not today" } }), "")).toBe(
      "flow 3 cancelled: not today",
    );
    expect(endLine(view({ status: "error", error: { job: 0, reason: "the flow ran past its deadline" } }), "")).toBe(
      "flow 3 failed: the flow ran past its deadline",
    );
  });
});

describe("a context watch's line", () => {
  const event = (extra: Partial<ContextStreamEvent>): ContextStreamEvent =>
    ({
      seq: 7,
      flow_seq: 1,
      at_ms: 1_764_400_000_000,
      context_id: 1,
      flow_id: 3,
      trace_id: "t",
      status: "dispatched",
      type: "flow.created",
      ...extra,
    }) as ContextStreamEvent;
  it("names the flow, says what started it unless a submission did, its labels, and plain words", () => {
    const created = event({ name: "nightly", labels: { env: "prod" }, trigger: { kind: "schedule", schedule_id: 2 } });
    expect(contextEventLine(created)).toBe("[7] 2025-11-29T07:06:40Z flow 3 (nightly) created (schedule 2; env=prod)");
    expect(contextEventLine(event({ trigger: { kind: "manual" } }))).toBe("[7] 2025-11-29T07:06:40Z flow 3 created");
    expect(contextEventLine(event({ type: "flow.error", status: "error", error: "job a failed: exit 1" }))).toBe(
      "[7] 2025-11-29T07:06:40Z flow 3 failed: job a failed: exit 1",
    );
    expect(contextEventLine(event({ type: "flow.compensation_failed", status: "compensation_failed" }))).toBe(
      "[7] 2025-11-29T07:06:40Z flow 3 compensation failed",
    );
  });
});
