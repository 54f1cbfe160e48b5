import { describe, expect, it } from "vitest";
import { FLOW_LIMITS, jobEnvironment, type FlowEvent, type JobState } from "../../shared/flow/index.js";
import { MAP_ITEMS_MAX } from "../../shared/model/index.js";
import { Driver, flowOf, jobIn, started, T } from "./flow-sim.js";
import { expanded, finishedWith, list, listed, process, summarize } from "./growth-sim.js";

// Flows that grow while they run: maps (a job run once per item of a dependency's list) and
// jobs a result adds. Each is one transition of the pure machine, applied once however often its
// event repeats.

describe("a map", () => {
  it("asks for its instances' ids when its list is known, then runs one instance per item", () => {
    const d = started([list([]), process({ retries: 1 }), summarize]);
    listed(d, ["a.txt", { n: 2 }, "c.txt"]);
    expect(d.job(101)).toMatchObject({ status: "started", attempt: 1, deadline: { kind: "expand" } });
    expect(d.effects).toContainEqual({ type: "expand", job: 101, jobs: 3, messages: 3 * 2 + 1 });
    const t = d.send(expanded(101));
    expect(t.outcome).toBe("applied");
    expect(t.effects).toContainEqual({ type: "jobsAdded", jobs: [200, 201, 202], by: 101 });
    expect(d.state.order).toEqual([100, 101, 102, 200, 201, 202]);
    expect(d.job(101).instances).toEqual([200, 201, 202]);
    expect(d.job(101).deadline).toBeUndefined();
    const first = d.job(200);
    expect(first).toMatchObject({ name: "process[0]", status: "dispatched", attempt: 1, mapOf: 101, itemIndex: 0 });
    expect(first.messageBase).toBe(5000);
    expect(d.job(201).messageBase).toBe(5002);
    expect(first.spec.map).toBeUndefined();
    const env = jobEnvironment(d.state, d.job(201));
    expect(env).toMatchObject({ ITEM: '{"n":2}', ITEM_INDEX: "1", MODE: "fast", DEP_LIST_FILES: expect.any(String) });
    expect(jobEnvironment(d.state, first).ITEM).toBe("a.txt");
    // A repeated expansion (the shell's effect and its deadline both asked) changes nothing.
    expect(d.send(expanded(101, 400, 7000)).outcome).toBe("duplicate");

    d.run(200, { result: { size: "1" } });
    d.run(201, { error: "boom" }); // retried (retries: 1)
    expect(d.job(201)).toMatchObject({ status: "dispatched", deadline: { kind: "retry" } });
    d.send({ type: "deadline", job: 201, attempt: 1, kind: "retry", at: T + 100_000 });
    d.run(201, { result: { size: "2" } });
    expect(d.job(101).status).toBe("started");
    d.run(202, { result: { size: "3" } });
    expect(d.job(101)).toMatchObject({
      status: "finished",
      result: { items: JSON.stringify([{ size: "1" }, { size: "2" }, { size: "3" }]) },
    });
    expect(d.job(102).status).toBe("dispatched");
    const next = jobEnvironment(d.state, d.job(102));
    expect(JSON.parse(next.DEP_PROCESS as string)).toEqual([{ size: "1" }, { size: "2" }, { size: "3" }]);
    expect(JSON.parse(next.FLOW_INPUTS as string)).toEqual({ process: [{ size: "1" }, { size: "2" }, { size: "3" }] });
    d.run(102);
    expect(d.state.status).toBe("finished");
  });

  it("over an empty list finishes at once with an empty list, asking for nothing", () => {
    const d = started([list([]), process(), summarize]);
    listed(d, []);
    expect(d.job(101)).toMatchObject({ status: "finished", result: { items: "[]" } });
    expect(d.effects.some((e) => e.type === "expand")).toBe(false);
    expect(JSON.parse(jobEnvironment(d.state, d.job(102)).DEP_PROCESS as string)).toEqual([]);
  });

  it.each([
    ["not JSON", "a.txt b.txt", "the value is not JSON"],
    ["not a list", '{"a":1}', "the value is not a JSON list"],
    [
      "too long",
      JSON.stringify(Array.from({ length: MAP_ITEMS_MAX + 1 }, (_, i) => i)),
      `over the limit of ${MAP_ITEMS_MAX}`,
    ],
  ])("over a value that is %s ends in error saying why, and fails the flow", (_what, value, why) => {
    const d = started([list([]), process(), summarize]);
    listed(d, value);
    expect(d.job(101).status).toBe("error");
    expect(d.job(101).error).toContain(why);
    expect(d.job(102).status).toBe("error");
    expect(d.state.status).toBe("error");
    expect(d.effects.some((e) => e.type === "expand")).toBe(false);
  });

  it("whose instances would take the flow past its job limit ends in error naming the limit", () => {
    // A flow one job short of room for the whole list.
    const others = FLOW_LIMITS.jobsPerFlow - MAP_ITEMS_MAX - 2 + 1;
    const gates = Array.from({ length: others }, (_, i) => jobIn({ name: `g${i}`, depends: ["list"] }));
    const d = started([list([]), process(), ...gates]);
    listed(
      d,
      Array.from({ length: MAP_ITEMS_MAX }, (_, i) => i),
    );
    expect(d.job(101).status).toBe("error");
    expect(d.job(101).error).toContain(`would take the flow to ${FLOW_LIMITS.jobsPerFlow + 1} jobs`);
  });

  it("whose list key is missing ends in error naming the key", () => {
    const d = started([list([]), process(), summarize]);
    d.run(100, { result: { other: "[]" } });
    expect(d.job(101).error).toBe("map over list.files: list's result has no files");
  });

  it("fails when an instance fails (the flow with it), once its other instances ended", () => {
    const d = started([list([]), process(), summarize]);
    listed(d, ["a", "b"]);
    d.send(expanded(101));
    d.run(200, { error: "bad input" });
    expect(d.state.error).toMatchObject({ job: 200, name: "process[0]" });
    expect(d.job(101).status).toBe("started"); // instance 1 still runs
    d.run(201);
    expect(d.job(101)).toMatchObject({ status: "error", error: "instance process[0] failed: bad input" });
    expect(d.state.status).toBe("error");
    expect(d.job(102).status).toBe("error");
  });

  it("with allow_failure finishes with null for an instance that failed, and the flow goes on", () => {
    const d = started([list([]), process({ allow_failure: true }), summarize]);
    listed(d, ["a", "b"]);
    d.send(expanded(101));
    d.run(200, { error: "bad input" });
    expect(d.state.error).toBeUndefined();
    d.run(201, { result: { ok: "1" } });
    expect(d.job(101)).toMatchObject({ status: "finished", result: { items: JSON.stringify([null, { ok: "1" }]) } });
    d.run(102);
    expect(d.state.status).toBe("finished");
  });

  it("ends when its instances end after a cancel, and an expansion after a cancel changes nothing", () => {
    const d = started([list([]), process(), summarize]);
    listed(d, ["a"]);
    d.send({ type: "cancel", reason: "enough", at: T + 3 });
    expect(d.job(101).status).toBe("error");
    expect(d.send(expanded(101)).outcome).toBe("stale");
    expect(d.state.order).toHaveLength(3);
  });

  it("that expanded is re-run from its failed instances, not expanded again", () => {
    const d = started([list([]), process(), summarize]);
    listed(d, ["a", "b"]);
    d.send(expanded(101));
    d.run(200);
    d.run(201, { error: "flaky" });
    expect(d.state.status).toBe("error");
    d.send({ type: "rerun", bases: { 101: 6000, 201: 6002, 102: 6004 }, at: T + 9 });
    expect(d.job(101)).toMatchObject({ status: "started", instances: [200, 201] });
    expect(d.job(201).status).toBe("dispatched");
    d.run(201, { result: { again: "1" } });
    expect(d.job(101).status).toBe("finished");
    expect(d.job(102).status).toBe("dispatched");
  });

  it("re-run from itself runs every instance again (not expanded again)", () => {
    const d = started([list([]), process(), summarize]);
    listed(d, ["a", "b"]);
    d.send(expanded(101));
    for (const id of [200, 201, 102]) d.run(id);
    expect(d.state.status).toBe("finished");
    const t = d.send({ type: "rerun", from: 101, bases: { 101: 6000, 102: 6002, 200: 6004, 201: 6006 }, at: T + 9 });
    expect(t.outcome).toBe("applied");
    expect(d.statusOf([101, 200, 201, 102])).toEqual([
      "started",
      "dispatched",
      "dispatched",
      "waiting_for_prerequisites",
    ]);
    expect(d.state.order).toHaveLength(5);
    d.run(200, { result: { v: "2" } });
    d.run(201, { result: { v: "3" } });
    expect(d.job(101).result).toEqual({ items: '[{"v":"2"},{"v":"3"}]' });
  });
});

describe("jobs a result adds", () => {
  const flow = () =>
    started([jobIn({ name: "seed" }), jobIn({ name: "gate" }), jobIn({ name: "later", depends: ["gate"] })]);

  it("join the flow with the result that brings them: applied once, however often the report repeats", () => {
    const d = flow();
    const add = [
      { name: "use", script: "echo", script_type: "sh", depends: ["seed"] },
      { name: "alone", script: "echo", script_type: "python" },
      { name: "after", script: "echo", script_type: "sh", depends: ["use", "later"], retries: 2 },
    ];
    const event = finishedWith(d, 100, add);
    const t = d.send(event);
    expect(t.outcome).toBe("applied");
    expect(t.effects).toContainEqual({ type: "jobsAdded", jobs: [300, 301, 302], by: 100 });
    expect(d.state.order).toEqual([100, 101, 102, 300, 301, 302]);
    expect(d.statusOf([100, 300, 301, 302])).toEqual([
      "finished",
      "dispatched",
      "dispatched",
      "waiting_for_prerequisites",
    ]);
    expect(d.job(300)).toMatchObject({ depends: [100], addedBy: 100, messageBase: 9000 });
    expect(d.job(302)).toMatchObject({ depends: [300, 102], messageBase: 9002 });
    expect(d.job(102).dependents).toEqual([302]);
    expect(JSON.parse(jobEnvironment(d.state, d.job(300)).FLOW_INPUTS as string)).toEqual({ seed: { n: "1" } });
    // The same report again (a runner that lost the answer) adds nothing.
    const again = d.send({ ...event, ids: { job: 400, message: 9500 } } as FlowEvent);
    expect(again.outcome).toBe("duplicate");
    expect(d.state.order).toHaveLength(6);

    for (const id of [101, 102, 300, 301]) d.run(id);
    expect(d.job(302).status).toBe("dispatched");
    d.run(302);
    expect(d.state.status).toBe("finished");
  });

  it("without ids allocated are not taken (the report is answered as not applicable, nothing changes)", () => {
    const d = flow();
    const t = d.send(finishedWith(d, 100, [{ name: "x", script: "echo", script_type: "sh" }], false));
    expect(t.outcome).toBe("not-applicable");
    expect(d.job(100).status).toBe("dispatched");
  });

  it.each([
    ["a field the schema refuses", [{ name: "x", script: "echo" }], "jobs.0.script_type"],
    ["an id", [{ id: 9, name: "x", script: "echo", script_type: "sh" }], "jobs.0.id: added jobs are given ids"],
    [
      "a compensation",
      [{ name: "x", script: "e", script_type: "sh", compensate: { script: "undo", script_type: "sh" } }],
      "jobs.0.compensate: an added job cannot have a compensation",
    ],
    ["a name the flow has", [{ name: "gate", script: "echo", script_type: "sh" }], "the flow has a job named gate"],
    [
      "a cycle",
      [
        { name: "x", script: "e", script_type: "sh", depends: ["y"] },
        { name: "y", script: "e", script_type: "sh", depends: ["x"] },
      ],
      "they form a dependency cycle: x → y → x",
    ],
    [
      "an unknown dependency",
      [{ name: "x", script: "e", script_type: "sh", depends: ["nope"] }],
      'jobs.0.depends.0: "nope" is neither',
    ],
    [
      "a dependency that started",
      [{ name: "x", script: "e", script_type: "sh", depends: ["gate"] }],
      "gate has started (dispatched)",
    ],
  ])("with %s are refused: the attempt fails saying why, nothing is added", (_what, add, why) => {
    const d = flow();
    d.send(finishedWith(d, 100, add));
    expect(d.job(100).status).toBe("error");
    expect(d.job(100).error).toContain("its added jobs were refused: ");
    expect(d.job(100).error).toContain(why);
    expect(d.state.order).toHaveLength(3);
  });

  it("past the flow's job limit are refused, naming the limit", () => {
    const d = flow();
    const many = Array.from({ length: FLOW_LIMITS.jobsPerFlow - 2 }, (_, i) => ({
      name: `n${i}`,
      script: "e",
      script_type: "sh",
    }));
    d.send(finishedWith(d, 100, many));
    expect(d.job(100).error).toContain(`over the limit of ${FLOW_LIMITS.jobsPerFlow}`);
  });

  it("refused by the shell (what needs storage) fail the attempt with its reason", () => {
    const d = flow();
    const event = finishedWith(d, 100, [{ name: "x", script: "e", script_type: "sh", runner_id: 9 }]);
    d.send({ ...event, refused: "jobs.0.runner_id: runner 9 is not registered in context 3" } as FlowEvent);
    expect(d.job(100).error).toBe(
      "its added jobs were refused: jobs.0.runner_id: runner 9 is not registered in context 3",
    );
  });

  it("of a job outside any flow are refused (it has no flow to add them to)", () => {
    const d = new Driver({ ...flowOf([jobIn({ name: "lone" })]), id: 0 });
    d.send({ type: "start", at: T });
    d.send(finishedWith(d, 100, [{ name: "x", script: "e", script_type: "sh" }]));
    expect(d.job(100).error).toBe("its added jobs were refused: a job outside any flow cannot add jobs: submit a flow");
    expect(d.state.order).toEqual([100]);
  });

  it("of a job that ends after its flow failed are left out", () => {
    const d = started([jobIn({ name: "seed" }), jobIn({ name: "bad" })]);
    d.run(101, { error: "no" });
    expect(d.state.status).toBe("error");
    const t = d.send(finishedWith(d, 100, [{ name: "x", script: "e", script_type: "sh" }]));
    expect(t.outcome).toBe("applied");
    expect(d.job(100).status).toBe("finished");
    expect(d.state.order).toEqual([100, 101]);
  });

  it("may be maps, over the result of the job that adds them", () => {
    const d = flow();
    const add = [{ name: "each", script: "e", script_type: "sh", depends: ["seed"], map: { over: "seed.n" } }];
    d.send(finishedWith(d, 100, add));
    // seed's result is {n: "1"}: JSON, but not a list.
    expect(d.job(300)).toMatchObject({ status: "error", error: "map over seed.n: the value is not a JSON list" });
  });

  it("join before the flow's compensations, which stay last, and the flow still unwinds", () => {
    const d = started([
      jobIn({ name: "book", compensate: { script: "undo", script_type: "sh" } }),
      jobIn({ name: "pay", depends: ["book"] }),
    ]);
    const comp = d.state.order[2] as number;
    expect(d.job(comp).name).toBe("book.compensate");
    d.send(finishedWith(d, 100, [{ name: "extra", script: "e", script_type: "sh", depends: ["book"] }]));
    expect(d.state.order).toEqual([100, 101, 300, comp]);
    d.run(101, { error: "declined" });
    d.run(300);
    expect(d.state.status).toBe("compensating");
    d.run(comp);
    expect(d.state.status).toBe("compensated");
  });

  it("leave the jobs of the flow as they were (no new dependencies)", () => {
    const d = flow();
    const before: JobState = d.job(102);
    d.send(finishedWith(d, 100, [{ name: "x", script: "e", script_type: "sh", depends: ["later"] }]));
    expect(d.job(102).depends).toEqual(before.depends);
    expect(d.job(102).dependents).toEqual([300]);
  });
});
