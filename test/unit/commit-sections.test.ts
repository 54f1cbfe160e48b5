import { describe, expect, it } from "vitest";
import type { FlowEffect, Transition } from "../../shared/flow/index.js";
import { Keys, workItem } from "../../shared/keys.js";
import { CALL_BYTES, callBytes } from "../../shared/store/commit-calls.js";
import {
  DISPATCHES_PER_PART,
  StepSection,
  type BatchOutput,
  type CommitStep,
  type Op,
} from "../../shared/store/commit-sections.js";
import { planCommit } from "../../shared/store/flow-plan.js";
import { jobIn, started, T, type Driver } from "./flow-sim.js";

// What each effect of a transition writes into its commit section (commit-sections.ts), one
// writer at a time; that the script applies these operations is tested against Redis in
// test/worker (job-end, flow-result, dead-letters, commit-claims, sweep-due).

const keys = new Keys("");
const NOW = T + 5_000;
/** The sh queue of flow 7 (context 3), and the work item of job 100's first attempt there. */
const QUEUE = keys.queue(3, "sh", 7);
const ITEM = workItem({ messageKey: keys.message(3, 5, 1000), flowId: 7, jobId: 100, attempt: 1 });

function output(): BatchOutput {
  return { messages: [], ready: new Map(), frees: new Map(), notifies: false };
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
  const parts = section.close();
  expect(parts.length).toBeLessThanOrEqual(1);
  const { guarded, ops } = parts[0] ?? { guarded: false, ops: [] };
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
      ["H", keys.flow(3, 7), 1],
      ["R", keys.flowsByStatus(3, "dispatched"), 0],
      ["Z", keys.flowsByStatus(3, "started"), 0],
      ["Z", keys.deadlines(3), 0],
      ["Z", keys.sweepDue(), 0],
    ]);
  });

  it("a dispatch: the attempt's message (the job's own variables only), its work item queued", () => {
    const d = twoJobs();
    const t = { state: d.state, effects: only(d.effects, "dispatch"), outcome: "applied" as const };
    const { ops, out } = sectionOf(t);
    expect(ops.map(([op, key, , g]) => [op, key, g])).toEqual([
      ["H", keys.message(3, 5, 1000), 2],
      ["P", QUEUE, undefined],
    ]);
    const message = JSON.parse(valueOf(ops[0] as Op, "job") ?? "[]") as { env_vars: Record<string, string> }[];
    expect(message[0]?.env_vars).toEqual({ OWN: "1" });
    expect(ops[1]?.[2]).toEqual([ITEM]);
    expect(out.messages.map((m) => m.id)).toEqual([1000]);
    expect([...out.ready.keys()]).toEqual([QUEUE]);
  });

  it("a job's end: the job alone, guarded by its ended_at, with its result; its slot freed; its log lines", () => {
    const d = twoJobs();
    const t = d.run(100, { result: { n: "1" } });
    const lines = [{ timestamp: 1, stream: "stdout" as const, message: "hi" }];
    const { ops, out } = sectionOf({ ...t, effects: only(t.effects, "jobEnded") }, { job: 100, lines });
    expect(ops.map(([op, key, , g]) => [op, key, g])).toEqual([
      ["H", keys.job(3, 5, 100), 3],
      ["L", keys.message(3, 5, 1000), undefined],
    ]);
    expect(valueOf(ops[0] as Op, "result")).toBe('{"n":"1"}');
    expect([...out.frees]).toEqual([[keys.runnerSlots(3, 1), { runner: 1, items: [ITEM] }]]);
  });

  it("a failed attempt: its message ends in error guarded by its ended_at, its slot freed", () => {
    const d = started([jobIn({ name: "a", retries: 1 })]);
    const t = d.run(100, { error: "exit code 2" });
    const { ops, out } = sectionOf({ ...t, effects: only(t.effects, "attemptFailed") });
    expect(ops.map(([op, key, , g]) => [op, key, g])).toEqual([["H", keys.message(3, 5, 1000), 3]]);
    expect(valueOf(ops[0] as Op, "status")).toBe("error");
    expect(out.frees.size).toBe(1);
  });

  it("a dead letter: kept within the cap, with the keys the cap is read from", () => {
    const d = started([jobIn({ name: "a" })]);
    const t = d.run(100, { error: "exit code 2" });
    const { ops } = sectionOf({ ...t, effects: only(t.effects, "deadLetter") }, undefined, 3);
    expect(ops.map(([op, key]) => [op, key])).toEqual([["X", keys.deadLetters(3)]]);
    const [index, context, counters, id, entry, , cap] = (ops[0] as Op)[2];
    // Keys, which the call names by their positions (commit-calls.ts).
    expect([index, context, counters]).toEqual([keys.deadLetterIndex(3), keys.context(3), keys.contextCounters(3)]);
    expect(id).toBe("7:100:1");
    expect(JSON.parse(entry ?? "{}")).toMatchObject({ job_key: "a", reason: "exit code 2", attempts: 1 });
    expect(cap).toBe("3");
  });

  it("a flow's end: no result in its record or its mail, the mail in the inbox, the figures", () => {
    const d = started([jobIn({ name: "a" })]);
    const t = d.run(100, { result: { big: "x".repeat(100) } });
    const { ops, out } = sectionOf({ ...t, effects: only(t.effects, "flowEnded") });
    expect(ops.map(([op, key, , g]) => [op, key, g])[0]).toEqual(["H", keys.flow(3, 7), 1]);
    expect((ops[0] as Op)[2]).not.toContain("result");
    expect(ops.map(([op, key]) => `${op} ${key}`)).toEqual(
      expect.arrayContaining([
        `R ${keys.deadlines(3)}`,
        `Z ${keys.ended(3, "finished")}`,
        `P ${keys.msgIn(3, 5)}`,
        `Z ${keys.inboxDue(3)}`,
        `P ${keys.contextFigures(3)}`,
        `P ${keys.msgOut(3)}`,
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
      ["D", keys.flow(3, 7), 1],
      ["H", keys.flow(3, 7), undefined],
      ["R", keys.flowsByStatus(3, "error"), undefined],
      ["Z", keys.flowsByStatus(3, "started"), undefined],
      ["R", keys.ended(3, "error"), undefined],
      ["E", keys.message(3, 5, 1000), undefined],
      ["H", keys.job(3, 5, 100), undefined],
      ["D", keys.job(3, 5, 100), undefined],
      ["Z", keys.deadlines(3), undefined],
      ["Z", keys.sweepDue(), undefined],
    ]);
  });

  it("a re-run from a job of a finished flow: out of the finished indexes, its run and env kept in the record", () => {
    const d = started([jobIn({ name: "a" }), jobIn({ name: "b", depends: ["a"] })], { envVars: { KEEP: "1" } });
    d.run(100);
    d.run(101);
    const t = d.send({ type: "rerun", bases: { 101: 2000 }, at: T + 9_000, from: 101, run: 1, env: { MODE: "x" } });
    const { ops } = sectionOf({ ...t, effects: only(t.effects, "flowRerun") });
    expect(ops.map(([op, key, , g]) => [op, key, g]).slice(0, 5)).toEqual([
      ["D", keys.flow(3, 7), 1],
      ["H", keys.flow(3, 7), undefined],
      ["R", keys.flowsByStatus(3, "finished"), undefined],
      ["Z", keys.flowsByStatus(3, "started"), undefined],
      ["R", keys.ended(3, "finished"), undefined],
    ]);
    const record = ops[1] as Op;
    expect([valueOf(record, "status"), valueOf(record, "run")]).toEqual(["started", "2"]);
    expect(JSON.parse(valueOf(record, "env_vars") ?? "null")).toEqual({ KEEP: "1", MODE: "x" });
  });

  it("puts the surest guard first, and leaves a section of unguarded writes unguarded", () => {
    const d = twoJobs();
    const t = d.run(100);
    // The job's end (3) and the next dispatch (2): the new message guards the section.
    const { brief, guarded } = sectionOf(t);
    expect(guarded).toBe(true);
    expect(brief[0]).toEqual(["H", keys.message(3, 5, 1001), 2]);
    const logsOnly = sectionOf({ state: d.state, effects: [], outcome: "applied" }, { job: 101, lines: [] });
    expect(logsOnly.ops).toEqual([]);
  });

  it("cuts a section of thousands of dispatches into parts, each guarded by its own first message", () => {
    const n = 2 * DISPATCHES_PER_PART + 500;
    const d = started(Array.from({ length: n }, (_, i) => jobIn({ name: `j${i}` })));
    const out = output();
    const section = new StepSection(keys, { state: d.state, effects: d.effects }, NOW, 10_000, out);
    for (const effect of d.effects) section.write(effect);
    const parts = section.close();
    expect(parts.map((p) => p.guarded)).toEqual([true, true, true]);
    // The first part keeps the start's guard (the flow's started_at), the others their first message.
    expect(parts.map((p) => [p.ops[0]?.[0], p.ops[0]?.[1], p.ops[0]?.[3]])).toEqual([
      ["H", keys.flow(3, 7), 1],
      ["H", keys.message(3, 5, 1000 + DISPATCHES_PER_PART), 2],
      ["H", keys.message(3, 5, 1000 + 2 * DISPATCHES_PER_PART), 2],
    ]);
    // Each part queues the work items of its own messages, in order: all of them once.
    const items = parts.map((p) => p.ops.filter(([op]) => op === "P").flatMap(([, , values]) => values));
    expect(items.map((list) => list.length)).toEqual([DISPATCHES_PER_PART, DISPATCHES_PER_PART, 500]);
    expect(items.flat()).toEqual(
      Array.from({ length: n }, (_, i) =>
        workItem({ messageKey: keys.message(3, 5, 1000 + i), flowId: 7, jobId: 100 + i, attempt: 1 }),
      ),
    );
    expect(out.messages.length).toBe(n);
  });

  it("plans a batch too big for one call as several, cut between sections, each under CALL_BYTES", () => {
    const n = 10_000;
    const script = "#".repeat(500);
    const d = started(Array.from({ length: n }, (_, i) => jobIn({ name: `j${i}`, script })));
    const plan = planCommit(keys, [{ state: d.state, effects: d.effects }], NOW);
    const calls = [{ keys: plan.keys, args: plan.args }, ...(plan.more ?? [])];
    expect(calls.length).toBeGreaterThan(1);
    for (const call of calls) expect(callBytes(call)).toBeLessThanOrEqual(CALL_BYTES);
    expect(plan.sections).toBe(n / DISPATCHES_PER_PART);
    // A creation's call takes room from the first: with none left, the first call is empty.
    const behind = planCommit(keys, [{ state: d.state, effects: d.effects }], NOW, 10_000, 0);
    expect(behind.args).toEqual([]);
    expect(behind.more?.length).toBe(calls.length);
    // A small batch stays one call, as it always was.
    const small = started([jobIn({ name: "a" }), jobIn({ name: "b" })]);
    expect(planCommit(keys, [{ state: small.state, effects: small.effects }], NOW).more).toBeUndefined();
  });
});
