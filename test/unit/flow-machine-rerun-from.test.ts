import { describe, expect, it } from "vitest";
import {
  flowResult,
  jobEnvironment,
  messageId,
  messagesNeeded,
  rerunBases,
  rerunJobs,
  resultMessageId,
  type FlowEvent,
} from "../../shared/flow/index.js";
import { changesOf } from "../../shared/flow/changes.js";
import { Driver, dispatched, flowOf, jobIn, started, T } from "./flow-sim.js";

// A re-run from a chosen job (shared/flow/rerun.ts): that job and everything downstream of it
// run again, whatever their status; everything upstream keeps its result; each re-run is the
// flow's next run, and may change its env.

/** The re-run event a coordinator would send: fresh ids for the jobs it runs again, after `firstFree`. */
function rerunEvent(d: Driver, ask: { from?: number; env?: Record<string, string>; run?: number }, firstFree = 5000) {
  const event: FlowEvent = { type: "rerun", bases: rerunBases(d.state, firstFree, ask.from), at: T + 100_000, ...ask };
  return event;
}

/** a → b, a → c, b + c → d, and x on its own: ids 100 (a), 101 (b), 102 (c), 103 (d), 104 (x). */
function diamond(env: Record<string, string> = {}, d?: Partial<Parameters<typeof jobIn>[0]>): Driver {
  return started(
    [
      jobIn({ name: "a" }),
      jobIn({ name: "b", depends: ["a"] }),
      jobIn({ name: "c", depends: ["a"] }),
      jobIn({ name: "d", depends: ["b", "c"], ...d }),
      jobIn({ name: "x" }),
    ],
    { envVars: env },
  );
}

/** Runs every job that is waiting for a runner, until none is: each finishes with `<key>@<attempt>`. */
function runAll(d: Driver): string[] {
  const ran: string[] = [];
  for (let round = 0; round < 50; round++) {
    const ready = d.state.order.filter((id) => d.job(id).status === "dispatched" && !d.job(id).delivery);
    if (ready.length === 0) break;
    for (const id of ready) {
      const job = d.job(id);
      ran.push(`${job.name}@${job.attempt}`);
      d.run(id, { result: { v: `${job.name}@${job.attempt}` } });
    }
  }
  return ran;
}

describe("re-run from a job", () => {
  it("runs a middle job of a diamond and what is downstream again; upstream and the rest keep their results", () => {
    const d = diamond();
    expect(runAll(d)).toEqual(["a@1", "x@1", "b@1", "c@1", "d@1"]);
    expect(d.state.status).toBe("finished");
    const before = d.state;
    expect(rerunJobs(before, 101)).toEqual([101, 103]);
    expect(messagesNeeded([d.job(101).spec, d.job(103).spec])).toBe(3);

    const t = d.send(rerunEvent(d, { from: 101, run: 1 }));
    expect(t.outcome).toBe("applied");
    expect(t.effects).toEqual([
      { type: "flowRerun", jobs: [101, 103], was: "finished", from: 101 },
      { type: "dispatch", job: 101, attempt: 2 },
    ]);
    expect(d.state).toMatchObject({ status: "started", run: 2 });
    expect(d.state.endedAt).toBeUndefined();
    // Upstream and beside: the very same job objects, results and all.
    for (const id of [100, 102, 104]) expect(d.job(id)).toBe(before.jobs.get(id));
    expect(d.statusOf([101, 103])).toEqual(["dispatched", "waiting_for_prerequisites"]);
    expect(d.job(103)).toMatchObject({ attempt: 1, attemptFloor: 1 });
    expect(d.job(103).result).toBeUndefined();
    expect(Object.keys(flowResult(d.state))).toEqual(["a", "c", "x"]);
    expect(d.state.resultBytes).toBeUndefined(); // counted again from the results kept
    // The fresh ids: b's attempt 2 is the block's first, d's attempt 2 the next; the result after them.
    expect(messageId(d.job(101), 2)).toBe(5000);
    expect(messageId(d.job(103), 2)).toBe(5001);
    expect(resultMessageId(d.state)).toBe(5002);

    expect(runAll(d)).toEqual(["b@2", "d@2"]);
    expect(d.state).toMatchObject({ status: "finished", run: 2 });
    expect(flowResult(d.state)).toMatchObject({ a: { v: "a@1" }, b: { v: "b@2" }, c: { v: "c@1" }, d: { v: "d@2" } });
    expect(d.effects.filter((e) => e.type === "flowEnded")).toHaveLength(2);
  });

  it("re-runs from a root: every job downstream of it, whatever its status", () => {
    const d = diamond();
    runAll(d);
    const t = d.send(rerunEvent(d, { from: 100, run: 1 }));
    expect(t.effects[0]).toMatchObject({ jobs: [100, 101, 102, 103] });
    expect(runAll(d)).toEqual(["a@2", "b@2", "c@2", "d@2"]);
    expect(d.job(104).attempt).toBe(1);
  });

  it("gives the new attempts the env it changed, from this run on; the rules downstream are decided again", () => {
    const d = diamond({ MODE: "full", KEEP: "1" }, { when: 'env.MODE == "full"' });
    runAll(d);
    expect(d.job(103).status).toBe("finished");
    const t = d.send(rerunEvent(d, { from: 101, run: 1, env: { MODE: "lite", INPUT_SIZE: "3" } }));
    expect(t.effects[0]).toEqual({
      type: "flowRerun",
      jobs: [101, 103],
      was: "finished",
      from: 101,
      env: ["MODE", "INPUT_SIZE"],
    });
    expect(d.state.envVars).toEqual({ MODE: "lite", KEEP: "1", INPUT_SIZE: "3" });
    expect(jobEnvironment(d.state, d.job(101))).toMatchObject({ MODE: "lite", KEEP: "1", INPUT_SIZE: "3" });
    expect(runAll(d)).toEqual(["b@2"]);
    // d's when is now false: skipped, saying why; the flow still finishes.
    expect(d.job(103)).toMatchObject({ status: "skipped", skipReason: expect.stringMatching(/^when is false/) });
    expect(d.state.status).toBe("finished");
    // A later re-run keeps the env as changed, and changes it again only where asked.
    d.send(rerunEvent(d, { from: 103, run: 2, env: { MODE: "full" } }));
    expect(d.state.envVars).toEqual({ MODE: "full", KEEP: "1", INPUT_SIZE: "3" });
    expect(runAll(d)).toEqual(["d@2"]);
    expect(d.state).toMatchObject({ status: "finished", run: 3 });
  });

  it("runs a job skipped in the last run again, by its rules as they are now", () => {
    const d = started(
      [jobIn({ name: "check" }), jobIn({ name: "ship", depends: ["check"], when: 'deps.check.ok == "yes"' })],
      {},
    );
    d.run(100, { result: { ok: "no" } });
    expect(d.job(101).status).toBe("skipped");
    expect(d.state.status).toBe("finished");
    d.send(rerunEvent(d, { from: 100, run: 1 }));
    expect(d.job(101)).toMatchObject({ status: "waiting_for_prerequisites" });
    expect(d.job(101).skipReason).toBeUndefined();
    d.run(100, { result: { ok: "yes" } });
    expect(d.job(101).status).toBe("dispatched");
    d.run(101);
    expect(d.state.status).toBe("finished");
  });

  it("is refused while the flow runs, or before it started, changing nothing", () => {
    const d = diamond();
    d.run(100);
    for (const [ask, why] of [
      [{ from: 101, run: 1 }, "the flow is started: it can be re-run from a job once it ended (cancel it first)"],
      [{ run: 1 }, "the flow is started: only a failed one can be re-run"],
    ] as const) {
      const t = d.send({ type: "rerun", bases: { 101: 9000, 103: 9001 }, at: T + 1, ...ask });
      expect([t.outcome, t.reason]).toEqual(["not-applicable", why]);
    }
    const never = new Driver(flowOf([jobIn({ name: "a" }), jobIn({ name: "b", depends: ["a"] })]));
    expect(never.send({ type: "rerun", bases: { 101: 1 }, at: T, from: 101, run: 1 }).reason).toBe(
      "the flow is dispatched: it can be re-run from a job once it ended (cancel it first)",
    );
  });

  it("takes a repeated re-run (the same request again) once: the run it names is gone", () => {
    const d = diamond();
    runAll(d);
    const event = rerunEvent(d, { from: 102, run: 1 });
    expect(d.send(event).outcome).toBe("applied");
    const after = d.state;
    const again = d.send(event);
    expect([again.outcome, again.reason]).toEqual([
      "not-applicable",
      "the flow is at run 2, not 1: it was re-run since (a repeated request, or another's)",
    ]);
    expect(d.state).toBe(after);
    // Also once the re-run ended: the flow is finished again, and still not at run 1.
    runAll(d);
    expect(d.send(event).outcome).toBe("not-applicable");
    expect(d.state.run).toBe(2);
  });

  it("refuses a job that is not the flow's, and a re-run without from of a flow that finished", () => {
    const d = diamond();
    runAll(d);
    expect(d.send({ type: "rerun", bases: {}, at: T, from: 999, run: 1 }).reason).toBe("the flow has no job 999");
    expect(d.send({ type: "rerun", bases: {}, at: T, run: 1 }).reason).toBe(
      "the flow is finished: only a failed one can be re-run",
    );
    expect(d.send({ type: "rerun", bases: { 101: 1 }, at: T, from: 101 }).reason).toBe("no message ids for job 103");
  });

  it("on a failed flow, runs its failures again too, and waits for attempts still in flight", () => {
    // a → b, a → c; b fails while c is in flight; x ran.
    const d = started([
      jobIn({ name: "a" }),
      jobIn({ name: "b", depends: ["a"] }),
      jobIn({ name: "c", depends: ["a"] }),
      jobIn({ name: "x" }),
    ]);
    d.run(100);
    d.run(103);
    const c = { job: 102, attempt: 1, runner: 4 };
    d.send({ type: "assigned", ...c, at: T + 10 });
    d.run(101, { error: "boom" });
    expect([d.state.status, d.job(102).status]).toEqual(["error", "dispatched"]);
    // From a: c would run again while its attempt runs: refused, saying so.
    const refused = d.send(rerunEvent(d, { from: 100, run: 1 }));
    expect(refused.reason).toBe(
      "the flow still runs job c (attempt 1), which a re-run from a would run again: cancel the flow first, or wait for it",
    );
    // From x (beside the failure): x again, and b, the failure, with it; c runs on.
    expect(rerunJobs(d.state, 103)).toEqual([101, 103]);
    const t = d.send(rerunEvent(d, { from: 103, run: 1 }));
    expect(t.effects[0]).toEqual({ type: "flowRerun", jobs: [101, 103], was: "error", from: 103 });
    expect(d.state.error).toBeUndefined();
    d.send({ type: "delivered", ...c, acknowledged: true, at: T + 20 });
    d.send({ type: "finished", ...c, result: { v: "c" }, at: T + 30 });
    expect(runAll(d)).toEqual(["b@2", "x@2"]);
    expect(d.state).toMatchObject({ status: "finished", run: 2 });
    expect(dispatched(d)).toEqual([100, 103, 101, 102]);
  });
});

describe("the stream of a re-run", () => {
  it("tells the run, the jobs, the job it is from and the env names it changed; its job events carry the run", () => {
    const d = diamond();
    runAll(d);
    const before = d.state;
    const event = rerunEvent(d, { from: 101, run: 1, env: { MODE: "lite" } });
    const t = d.send(event);
    const changes = changesOf(before, t, event);
    expect(changes.map((c) => [c.type, c.job_id, c.run])).toEqual([
      ["flow.rerun", undefined, 2],
      ["job.waiting", 103, 2],
      ["job.ready", 101, 2],
    ]);
    expect(changes[0]).toMatchObject({ status: "started", jobs: [101, 103], from_job_id: 101, env_changed: ["MODE"] });
    // The first run's events carry no run: it is run 1.
    const first = diamond();
    const assigned: FlowEvent = { type: "assigned", job: 100, attempt: 1, runner: 1, at: T + 1 };
    const was = first.state;
    const firstRun = changesOf(was, first.send(assigned), assigned);
    expect(firstRun.map((c) => c.type)).toEqual(["job.dispatched"]);
    expect(firstRun[0]?.run).toBeUndefined();
  });
});
