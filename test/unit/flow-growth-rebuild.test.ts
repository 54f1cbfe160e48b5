import { describe, expect, it } from "vitest";
import { journalOf, rebuildState, type FlowState } from "../../shared/flow/index.js";
import { dispatchMessage, flowRecord, jobRecord } from "../../shared/store/flow-records.js";
import { jobIn, started, T } from "./flow-sim.js";
import { expanded, finishedWith, list, listed, process, summarize } from "./growth-sim.js";

// A flow that grew (a map's instances, jobs a result added), read back from what its commits
// wrote to Redis, as after its Durable Object lost its memory.

/**
 * What Redis holds of a flow in this state, as the commits wrote it: its record with its list of
 * jobs, each job's record (ended ones with their end), and the messages of the attempts sent.
 */
function storedOf(state: FlowState, journal = journalOf(state)) {
  const jobs = state.order.map((id) => {
    const job = state.jobs.job(id);
    const record = jobRecord(state, { ...job, status: "dispatched", attempt: 0 }, T);
    return ["finished", "error", "skipped"].includes(job.status)
      ? { ...record, status: job.status, result: job.result ?? {}, attempt: job.attempt, ended_at: T / 1000 }
      : record;
  });
  const messages = new Map(
    state.order.flatMap((id) => {
      const job = state.jobs.job(id);
      return job.attempt > 0 && job.spec.map === undefined ? [[id, [dispatchMessage(state, job, job.attempt, T)]]] : [];
    }) as [number, ReturnType<typeof dispatchMessage>[]][],
  );
  return { flow: flowRecord(state, T), contextId: state.contextId, callerId: state.callerId, jobs, messages, journal };
}

describe("a flow that grew, rebuilt from storage", () => {
  it("has its map's instances (their script and variables from the map's record) and its added jobs", () => {
    const d = started([list([]), process(), summarize]);
    listed(d, ["a", "b"]);
    d.send(expanded(101));
    d.run(200, { result: { ok: "0" } });
    const rebuilt = rebuildState(storedOf({ ...d.state, status: "started" }));
    expect(rebuilt.order).toEqual(d.state.order);
    expect(rebuilt.jobs.job(101)).toMatchObject({ status: "started", attempt: 1, instances: [200, 201] });
    expect(rebuilt.jobs.job(201)).toMatchObject({ name: "process[1]", mapOf: 101, itemIndex: 1, dependents: [101] });
    expect(rebuilt.jobs.job(201).spec).toEqual(d.job(201).spec);
    d.state = rebuilt;
    d.run(201, { result: { ok: "1" } });
    expect(d.job(101)).toMatchObject({ status: "finished", result: { items: '[{"ok":"0"},{"ok":"1"}]' } });

    const g = started([jobIn({ name: "seed" }), jobIn({ name: "gate" }), jobIn({ name: "later", depends: ["gate"] })]);
    g.send(finishedWith(g, 100, [{ name: "use", script: "e", script_type: "sh", depends: ["later"] }]));
    const again = rebuildState(storedOf(g.state));
    expect(again.jobs.job(300)).toMatchObject({ addedBy: 100, depends: [102], status: "waiting_for_prerequisites" });
    expect(again.jobs.job(102).dependents).toEqual([300]);
  });

  it("expands a map that had started and not expanded (its journal lost): its deadline is due", () => {
    const d = started([list([]), process(), summarize]);
    listed(d, ["a", "b", "c"]);
    expect(d.job(101).deadline?.kind).toBe("expand");
    const rebuilt = rebuildState(storedOf(d.state, {}));
    expect(rebuilt.jobs.job(101)).toMatchObject({ status: "started", attempt: 1, deadline: { kind: "expand" } });
    d.state = rebuilt;
    expect(d.send(expanded(101)).outcome).toBe("applied");
    expect(d.job(101).instances).toEqual([200, 201, 202]);
  });
});
