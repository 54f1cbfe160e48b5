import { runInDurableObject } from "cloudflare:test";
import { afterAll, beforeAll, beforeEach, describe, expect, it } from "vitest";
import { ApiError, type CoordinatorClient } from "../../shared/client/index.js";
import type { DeliveryPayload, FlowView, RunnerJob } from "../../shared/model/index.js";
import { eventually } from "../support/eventually.js";
import type { FlowObject } from "../../functions/flow/flow-object.js";
import { unreachableStore } from "./flow-fixtures.js";
import { ringAlarm, testWorker } from "./harness.js";
import { jobName, PullRunner } from "./pull-runner.js";

// Flows that grow while they run, through the real Worker in workerd over Redis: a map expands
// into its instances (their records in the commit that makes them), jobs a result adds join the
// flow once however often the report repeats, and both survive the object losing its memory.

const w = testWorker("growth");
afterAll(() => w.cleanup());
const away = unreachableStore(w.keys);

let client: CoordinatorClient;
let ctx: number;
let runner: PullRunner;

beforeAll(async () => {
  client = (await w.newActor()).client;
});
beforeEach(async () => {
  ctx = (await client.createContext()).id;
  runner = await PullRunner.register(w, client, ctx);
});

const sh = (name: string, extra: Record<string, unknown> = {}) => ({
  name,
  script: `echo ${name}`,
  script_type: "sh" as const,
  ...extra,
});

const jobOf = (view: FlowView, name: string) => view.jobs.find((j) => j.name === name);

/** The flow's object forgets its memory (as an eviction does; its storage, the journal, stays). */
async function evict(flowId: number): Promise<void> {
  await runInDurableObject(w.flowStub(ctx, flowId).stub, async (instance) => {
    (instance as unknown as { flow: { forget(): void } }).flow.forget();
  });
}

const stored = async (flowId: number) =>
  JSON.parse((await w.redis.exec<string | null>(["HGET", w.keys.flow(ctx, flowId), "jobs"])) ?? "[]") as number[];
const jobRecord = async (callerId: number, id: number) => {
  const fields = await w.redis.exec<string[]>(["HGETALL", w.keys.job(ctx, callerId, id)]);
  const record: Record<string, string> = {};
  for (let i = 0; i < fields.length; i += 2) record[fields[i] as string] = fields[i + 1] as string;
  return record as unknown as Record<keyof RunnerJob, string>;
};

describe("a map", () => {
  it("expands into one instance per item, survives its object's memory, and hands its dependents the list", async () => {
    const flow = await client.submitFlow(ctx, {
      start: true,
      jobs: [
        sh("list"),
        sh("process", { depends: ["list"], map: { over: "list.files" }, env_vars: { MODE: "x" } }),
        sh("summarize", { depends: ["process"] }),
      ],
    });
    const [list] = await runner.leaseSome(1);
    await runner.finish(list as DeliveryPayload, { files: JSON.stringify(["a", "b", { c: 3 }, "d"]) });
    // The commit that started the map asked for its ids at once: its instances come to the runner.
    const instances = await runner.leaseSome(4);
    expect(instances.map(jobName).sort()).toEqual(["process[0]", "process[1]", "process[2]", "process[3]"]);
    const third = instances.find((d) => jobName(d) === "process[2]") as DeliveryPayload;
    const job = third.message.job[0] as RunnerJob;
    expect(job.script).toBe("echo process");
    expect(job.env_vars).toMatchObject({
      ITEM: '{"c":3}',
      ITEM_INDEX: "2",
      MODE: "x",
      DEP_LIST_FILES: expect.any(String),
    });

    const view = await client.loadFlow(ctx, flow.id);
    const map = jobOf(view, "process");
    expect(map).toMatchObject({ kind: "map", status: "started", map: { over: "list.files" } });
    expect(map?.instances).toHaveLength(4);
    expect(map?.waiting).toMatchObject({ reason: "map", detail: "waiting for 4 of its 4 instances" });
    expect(jobOf(view, "process[0]")).toMatchObject({ map_of: map?.id, item_index: 0, kind: "script" });
    // Stored with the commit that made them: the flow's list of jobs, and each instance's record
    // (its item, its map's id; the script stays the map's).
    expect(await stored(flow.id)).toEqual(view.jobs.map((j) => j.id));
    const record = await jobRecord(view.caller_id, map?.instances?.[2] as number);
    expect(record).toMatchObject({ script: "", map_of: String(map?.id), item_index: "2", name: "process[2]" });
    expect(JSON.parse(record.env_vars)).toEqual({ ITEM: '{"c":3}', ITEM_INDEX: "2" });
    // Read through the API, an instance and its message are whole: the script and variables are its map's.
    const whole = { script: "echo process", env_vars: { MODE: "x", ITEM: '{"c":3}', ITEM_INDEX: "2" } };
    const api = `/v1/contexts/${ctx}`;
    expect(await client.request("GET", `${api}/jobs/${view.caller_id}/${third.message.job[0]?.id}`)).toMatchObject(
      whole,
    );
    const message = (await client.request("GET", `${api}/messages/${view.caller_id}/${third.message.id}`)) as {
      job: unknown[];
    };
    expect(message.job[0]).toMatchObject(whole);

    const byIndex = (i: number) => instances.find((d) => jobName(d) === `process[${i}]`) as DeliveryPayload;
    await runner.finish(byIndex(0), { n: "0" });
    await runner.finish(byIndex(1), { n: "1" });
    await evict(flow.id);
    const rebuilt = await client.loadFlow(ctx, flow.id);
    expect(jobOf(rebuilt, "process")).toMatchObject({ status: "started", instances: map?.instances });
    expect(rebuilt.jobs.map((j) => [j.name, j.status])).toEqual([
      ["list", "finished"],
      ["process", "started"],
      ["summarize", "waiting_for_prerequisites"],
      ["process[0]", "finished"],
      ["process[1]", "finished"],
      ["process[2]", "dispatched"],
      ["process[3]", "dispatched"],
    ]);
    await runner.finish(byIndex(2), { n: "2" });
    await runner.finish(byIndex(3), { n: "3" });
    const [summarize] = await runner.leaseSome(1);
    const env = (summarize?.message.job[0] as RunnerJob).env_vars;
    expect(JSON.parse(env.DEP_PROCESS as string)).toEqual([{ n: "0" }, { n: "1" }, { n: "2" }, { n: "3" }]);
    await runner.finish(summarize as DeliveryPayload);
    const done = await client.loadFlow(ctx, flow.id);
    expect(done.status).toBe("finished");
    expect(JSON.parse(done.result.process?.items ?? "")).toHaveLength(4);
  });

  it("over a list that is not one ends in error saying why", async () => {
    const flow = await client.submitFlow(ctx, {
      start: true,
      jobs: [sh("list"), sh("process", { depends: ["list"], map: { over: "list.files" } })],
    });
    const [list] = await runner.leaseSome(1);
    await runner.finish(list as DeliveryPayload, { files: "a b c" });
    const view = await client.loadFlow(ctx, flow.id);
    expect(view.status).toBe("error");
    expect(jobOf(view, "process")?.error).toBe("map over list.files: the value is not JSON (a JSON list is expected)");
  });

  it("whose over names no dependency is refused at submission, naming the field", async () => {
    const refused = await client
      .submitFlow(ctx, { jobs: [sh("list"), sh("process", { map: { over: "list.files" } })] })
      .catch((e: unknown) => e as ApiError);
    expect(refused).toBeInstanceOf(ApiError);
    expect((refused as ApiError).status).toBe(400);
    expect(JSON.stringify((refused as ApiError).problem)).toContain("body.jobs.1.map.over");
  });
});

describe("jobs a result adds", () => {
  it("join the flow once with the result, however often the report repeats, and survive its memory", async () => {
    const flow = await client.submitFlow(ctx, {
      start: true,
      jobs: [
        sh("seed"),
        sh("gate", { compensate: { script: "echo undo", script_type: "sh" } }),
        sh("later", { depends: ["gate"] }),
      ],
    });
    const first = await runner.leaseSome(2);
    const seed = first.find((d) => jobName(d) === "seed") as DeliveryPayload;
    const gate = first.find((d) => jobName(d) === "gate") as DeliveryPayload;
    const jobs = [sh("use", { depends: ["seed"] }), sh("after", { depends: ["use", "later"] })];
    await runner.report(seed, "ack");
    const body = { status: "finished", result: { n: "5" }, jobs };
    const answer = (await runner.report(seed, "result", body)) as { outcome: string };
    expect(answer.outcome).toBe("applied");
    const again = (await runner.report(seed, "result", body)) as { outcome: string };
    expect(again.outcome).toBe("duplicate");

    const view = await client.loadFlow(ctx, flow.id);
    // Joined jobs come before the compensations (last) in the flow's order.
    expect(view.jobs.map((j) => j.key)).toEqual(["seed", "gate", "later", "use", "after", "gate.compensate"]);
    const use = jobOf(view, "use");
    expect(use).toMatchObject({ added_by: jobOf(view, "seed")?.id, status: "dispatched" });
    expect(jobOf(view, "after")).toMatchObject({ status: "waiting_for_prerequisites" });
    // Stored, the joined ids were appended (the growth writes what it adds, not the whole list).
    const ids = view.jobs.map((j) => j.id);
    expect(await stored(flow.id)).toEqual([...ids.slice(0, 3), ids[5], ...ids.slice(3, 5)]);
    expect(await jobRecord(view.caller_id, use?.id as number)).toMatchObject({
      added_by: String(jobOf(view, "seed")?.id),
    });

    await evict(flow.id);
    const rebuilt = await client.loadFlow(ctx, flow.id);
    expect(rebuilt.jobs.map((j) => [j.key, j.status])).toEqual(view.jobs.map((j) => [j.key, j.status]));
    const [added] = await runner.leaseSome(1);
    expect(jobName(added as DeliveryPayload)).toBe("use");
    expect((added?.message.job[0] as RunnerJob).env_vars.DEP_SEED_N).toBe("5");
    await runner.finish(added as DeliveryPayload);
    await runner.finish(gate);
    const [later] = await runner.leaseSome(1);
    await runner.finish(later as DeliveryPayload);
    const [after] = await runner.leaseSome(1);
    expect(jobName(after as DeliveryPayload)).toBe("after");
    await runner.finish(after as DeliveryPayload);
    expect((await client.loadFlow(ctx, flow.id)).status).toBe("finished");
  });

  it("brought while storage is away are kept in the object's storage and taken by its alarm, once", async () => {
    const flow = await client.submitFlow(ctx, { start: true, jobs: [sh("seed")] });
    const [seed] = (await runner.leaseSome(1)) as [DeliveryPayload];
    await runner.report(seed, "ack");
    // As a delivery's answer would bring it (no runner sends it again): the ids cannot be allocated.
    const finished = {
      type: "finished" as const,
      job: (seed.message.job[0] as RunnerJob).id,
      attempt: seed.attempt,
      runner: runner.id,
      at: Date.now(),
      result: { n: "1" },
      jobs: [sh("use", { depends: ["seed"] })],
    };
    const stub = w.flowStub(ctx, flow.id).stub;
    await runInDurableObject(stub, async (instance, state) => {
      const object = (instance as unknown as { flow: FlowObject }).flow;
      object.store = () => away;
      await expect(object.report(finished)).rejects.toThrow();
      expect([...(await state.storage.list({ prefix: "owed-report:" })).keys()]).toEqual([
        `owed-report:${finished.job}:${finished.attempt}`,
      ]);
      expect(object.reports.owing()).toBe(true);
      delete (object as unknown as { store?: unknown }).store; // storage is back
    });
    await ringAlarm(stub);
    const view = await client.loadFlow(ctx, flow.id);
    expect(view.jobs.map((j) => [j.key, j.status])).toEqual([
      ["seed", "finished"],
      ["use", "dispatched"],
    ]);
    await runInDurableObject(stub, async (_instance, state) => {
      expect((await state.storage.list({ prefix: "owed-report:" })).size).toBe(0);
    });
    // The alarm again, or the report again: nothing joins twice.
    await ringAlarm(stub);
    const again = (await runner.report(seed, "result", {
      status: "finished",
      result: { n: "1" },
      jobs: finished.jobs,
    })) as {
      outcome: string;
    };
    expect(again.outcome).toBe("duplicate");
    expect((await client.loadFlow(ctx, flow.id)).jobs).toHaveLength(2);
  });

  it("pinned to a runner the context does not have are refused: the attempt fails saying so", async () => {
    const flow = await client.submitFlow(ctx, { start: true, jobs: [sh("seed")] });
    const [seed] = await runner.leaseSome(1);
    await runner.report(seed as DeliveryPayload, "ack");
    await runner.report(seed as DeliveryPayload, "result", {
      status: "finished",
      result: {},
      jobs: [sh("pinned", { runner_id: 999 })],
    });
    const view = await eventually(
      async () => {
        const now = await client.loadFlow(ctx, flow.id);
        return now.status === "error" ? now : undefined;
      },
      5_000,
      20,
      "the flow to fail",
    );
    expect(jobOf(view, "seed")?.error).toBe(
      `its added jobs were refused: jobs.0.runner_id: runner 999 is not registered in context ${ctx}`,
    );
    expect(view.jobs).toHaveLength(1);
  });

  it("that are not a list of objects are refused at the edge (400 naming the field)", async () => {
    await client.submitFlow(ctx, { start: true, jobs: [sh("seed")] });
    const [seed] = await runner.leaseSome(1);
    await runner.report(seed as DeliveryPayload, "ack");
    const refused = (await runner.report(seed as DeliveryPayload, "result", {
      status: "finished",
      result: {},
      jobs: "not a list",
    })) as ApiError;
    expect(refused).toBeInstanceOf(ApiError);
    expect(refused.status).toBe(400);
    expect(JSON.stringify(refused.problem)).toContain("body.jobs");
  });
});
