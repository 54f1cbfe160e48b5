import { describe, expect, it } from "vitest";
import type { FlowEffect, Transition } from "../../shared/flow/index.js";
import { Keys } from "../../shared/keys.js";
import { StepSection, type BatchOutput, type CommitStep, type Op } from "../../shared/store/commit-sections.js";
import { ScriptKeys } from "../../shared/store/script.js";
import { jobIn, started, T, type Driver } from "./flow-sim.js";

// What each effect of a transition writes into its commit section (commit-sections.ts), one
// writer at a time; that the script applies these operations is tested against Redis in
// test/worker (job-end, flow-result, dead-letters, commit-claims, sweep-due).

const keys = new Keys("");
const NOW = T + 5_000;

function output(): BatchOutput {
  return { scriptKeys: new ScriptKeys(), messages: [], ready: new Map(), frees: new Map(), notifies: false };
}

/** The section of one transition: its operations (op, key, the values' first 3), and the batch's output. */
function sectionOf(t: Transition, logs?: CommitStep["logs"], max = 10_000) {
  const out = output();
  const section = new StepSection(
    keys,
    { state: t.state, effects: t.effects, ...(logs ? { logs } : {}) },
    NOW,
    max,
    out,
  );
  for (const effect of t.effects) section.write(effect);
  const { guarded, ops } = section.close();
  return { guarded, ops, out, brief: ops.map(([op, key, , guard]) => [op, key, guard ?? 0]) };
}

const only = (effects: FlowEffect[], type: FlowEffect["type"]) => effects.filter((e) => e.type === type);
/** A field's value in an HSET's field / value pairs. */
const valueOf = (op: Op, field: string) => op[2].find((_, i, all) => i % 2 === 1 && all[i - 1] === field);

function twoJobs(): Driver {
  return started([jobIn({ name: "a", env_vars: { OWN: "1" } }), jobIn({ name: "b", depends: ["a"] })], {
    envVars: { FLOW_WIDE: "x" },
  });
}

describe("commit sections", () => {
  it("a start: the flow's status guarded by started_at, its indexes, its deadline and the sweep's due set", () => {
    const d = twoJobs();
    const t = { state: d.state, effects: only(d.effects, "flowStarted"), outcome: "applied" as const };
    const { brief, guarded } = sectionOf(t);
    expect(guarded).toBe(true);
    expect(brief).toEqual([
      ["H", "ctx:{3}:flow:7", 1],
      ["R", "ctx:{3}:index:flow:dispatched", 0],
      ["Z", "ctx:{3}:index:flow:started", 0],
      ["Z", "ctx:{3}:deadlines", 0],
      ["Z", "sweep:due", 0],
    ]);
  });

  it("a dispatch: the attempt's message (the job's own variables only), its work item queued", () => {
    const d = twoJobs();
    const t = { state: d.state, effects: only(d.effects, "dispatch"), outcome: "applied" as const };
    const { ops, out } = sectionOf(t);
    expect(ops.map(([op, key, , g]) => [op, key, g])).toEqual([
      ["H", "ctx:{3}:message:5:1000", 2],
      ["P", "ctx:{3}:queue:sh:7", undefined],
    ]);
    const message = JSON.parse(valueOf(ops[0] as Op, "job") ?? "[]") as { env_vars: Record<string, string> }[];
    expect(message[0]?.env_vars).toEqual({ OWN: "1" });
    expect(ops[1]?.[2]).toEqual(["ctx:{3}:message:5:1000|7|100|1"]);
    expect(out.messages.map((m) => m.id)).toEqual([1000]);
    expect([...out.ready.keys()]).toEqual(["ctx:{3}:queue:sh:7"]);
  });

  it("a job's end: the job alone, guarded by its ended_at, with its result; its slot freed; its log lines", () => {
    const d = twoJobs();
    const t = d.run(100, { result: { n: "1" } });
    const lines = [{ timestamp: 1, stream: "stdout" as const, message: "hi" }];
    const { ops, out } = sectionOf({ ...t, effects: only(t.effects, "jobEnded") }, { job: 100, lines });
    expect(ops.map(([op, key, , g]) => [op, key, g])).toEqual([
      ["H", "ctx:{3}:job:5:100", 3],
      ["L", "ctx:{3}:message:5:1000", undefined],
    ]);
    expect(valueOf(ops[0] as Op, "result")).toBe('{"n":"1"}');
    expect([...out.frees]).toEqual([
      ["ctx:{3}:runner:1:slots", { runner: 1, items: ["ctx:{3}:message:5:1000|7|100|1"] }],
    ]);
  });

  it("a failed attempt: its message ends in error guarded by its ended_at, its slot freed", () => {
    const d = started([jobIn({ name: "a", retries: 1 })]);
    const t = d.run(100, { error: "exit code 2" });
    const { ops, out } = sectionOf({ ...t, effects: only(t.effects, "attemptFailed") });
    expect(ops.map(([op, key, , g]) => [op, key, g])).toEqual([["H", "ctx:{3}:message:5:1000", 3]]);
    expect(valueOf(ops[0] as Op, "status")).toBe("error");
    expect(out.frees.size).toBe(1);
  });

  it("a dead letter: kept within the cap, with the keys the cap is read from", () => {
    const d = started([jobIn({ name: "a" })]);
    const t = d.run(100, { error: "exit code 2" });
    const { ops, out } = sectionOf({ ...t, effects: only(t.effects, "deadLetter") }, undefined, 3);
    expect(ops.map(([op, key]) => [op, key])).toEqual([["X", "ctx:{3}:deadletters"]]);
    const [index, context, counters, id, entry, , cap] = (ops[0] as Op)[2];
    expect([index, context, counters].map((p) => out.scriptKeys.list[Number(p) - 1])).toEqual([
      "ctx:{3}:index:deadletter",
      "ctx:{3}:context:3",
      "ctx:{3}:counters",
    ]);
    expect(id).toBe("7:100:1");
    expect(JSON.parse(entry ?? "{}")).toMatchObject({ job_key: "a", reason: "exit code 2", attempts: 1 });
    expect(cap).toBe("3");
  });

  it("a flow's end: no result in its record or its mail, the mail in the inbox, the figures", () => {
    const d = started([jobIn({ name: "a" })]);
    const t = d.run(100, { result: { big: "x".repeat(100) } });
    const { ops, out } = sectionOf({ ...t, effects: only(t.effects, "flowEnded") });
    expect(ops.map(([op, key, , g]) => [op, key, g])[0]).toEqual(["H", "ctx:{3}:flow:7", 1]);
    expect((ops[0] as Op)[2]).not.toContain("result");
    expect(ops.map(([op, key]) => `${op} ${key}`)).toEqual(
      expect.arrayContaining([
        "R ctx:{3}:deadlines",
        "Z ctx:{3}:ended:finished",
        "P ctx:{3}:msg_in:5",
        "Z ctx:{3}:inbox_due",
        "P ctx:{3}:figures",
        "P ctx:{3}:msg_out",
      ]),
    );
    const mail = out.messages[0];
    expect(mail?.flow_result).toEqual({ flow_id: 7, status: "finished" });
    expect(mail?.message).toBe("flow 7 finished: 1 job finished");
    expect(out.notifies).toBe(true);
  });

  it("a re-run: the flow's end cleared (the guard), each job's end copied into its last message, then forgotten", () => {
    const d = started([jobIn({ name: "a" })]);
    d.run(100, { error: "exit code 2" });
    const t = d.send({ type: "rerun", bases: { 100: 2000 }, at: T + 9_000 });
    const { ops } = sectionOf({ ...t, effects: only(t.effects, "flowRerun") });
    expect(ops.map(([op, key, , g]) => [op, key, g])).toEqual([
      ["D", "ctx:{3}:flow:7", 1],
      ["H", "ctx:{3}:flow:7", undefined],
      ["R", "ctx:{3}:index:flow:error", undefined],
      ["Z", "ctx:{3}:index:flow:started", undefined],
      ["R", "ctx:{3}:ended:error", undefined],
      ["E", "ctx:{3}:message:5:1000", undefined],
      ["H", "ctx:{3}:job:5:100", undefined],
      ["D", "ctx:{3}:job:5:100", undefined],
      ["Z", "ctx:{3}:deadlines", undefined],
      ["Z", "sweep:due", undefined],
    ]);
  });

  it("puts the surest guard first, and leaves a section of unguarded writes unguarded", () => {
    const d = twoJobs();
    const t = d.run(100);
    // The job's end (3) and the next dispatch (2): the new message guards the section.
    const { brief, guarded } = sectionOf(t);
    expect(guarded).toBe(true);
    expect(brief[0]).toEqual(["H", "ctx:{3}:message:5:1001", 2]);
    const logsOnly = sectionOf({ state: d.state, effects: [], outcome: "applied" }, { job: 101, lines: [] });
    expect(logsOnly.ops).toEqual([]);
  });
});
