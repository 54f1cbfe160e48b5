import { evictDurableObject, runInDurableObject } from "cloudflare:test";
import { afterAll, beforeAll, beforeEach, describe, expect, it } from "vitest";
import type { CoordinatorClient } from "../../shared/client/index.js";
import type { FlowStreamEvent, FlowView } from "../../shared/model/index.js";
import { failure, testWorker } from "./harness.js";
import { jobName, PullRunner } from "./pull-runner.js";

// A re-run from a chosen job with changed env, through the real Worker and Redis: the runner
// sees the new env, the stream tells the runs apart, the run and env survive the object's
// eviction, and a repeated request does not run the flow again.

const w = testWorker("rerun-from");
afterAll(() => w.cleanup());

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

const sh = (name: string, depends: string[] = []) => ({
  name,
  script: `echo ${name}`,
  script_type: "sh" as const,
  depends,
});

/** Leases and finishes jobs until `count` ran: each as `<name>` with the env it was given. */
async function runJobs(count: number): Promise<{ name: string; attempt: number; env: Record<string, string> }[]> {
  const ran: { name: string; attempt: number; env: Record<string, string> }[] = [];
  for (let round = 0; round < 30 && ran.length < count; round++) {
    for (const d of await runner.leaseSome()) {
      ran.push({ name: jobName(d), attempt: d.attempt, env: d.message.job[0]?.env_vars ?? {} });
      await runner.finish(d, { v: `${jobName(d)}@${d.attempt}` });
    }
  }
  return ran;
}

/** The flow's event stream as its object journalled it. */
function streamOf(flowId: number): Promise<FlowStreamEvent[]> {
  return runInDurableObject(w.flowStub(ctx, flowId).stub, (_instance, state) =>
    state.storage.sql
      .exec<{ body: string }>("SELECT body FROM stream ORDER BY seq")
      .toArray()
      .map((row) => JSON.parse(row.body) as FlowStreamEvent),
  );
}

const idOf = (view: FlowView, key: string) => view.jobs.find((j) => j.key === key)?.id as number;
const flowHash = (flowId: number) => w.redis.exec<string[]>(["HGETALL", w.keys.flow(ctx, flowId)]);

/** a → b → c, and d beside them, with env; run to its end. */
async function finishedFlow(): Promise<FlowView> {
  const flow = await client.submitFlow(ctx, {
    start: true,
    env_vars: { MODE: "full", INPUT_N: "1" },
    jobs: [sh("a"), sh("b", ["a"]), sh("c", ["b"]), sh("d")],
  });
  await runJobs(4);
  const view = await client.loadFlow(ctx, flow.id);
  expect([view.status, view.run]).toEqual(["finished", 1]);
  return view;
}

describe("re-run from a job", () => {
  it("runs the job and what is downstream with the new env, kept through an eviction; the stream tells run 2", async () => {
    const first = await finishedFlow();
    const a = idOf(first, "a");
    const b = idOf(first, "b");
    const c = idOf(first, "c");
    const again = await client.rerunFlow(ctx, first.id, { from: "b", env_vars: { INPUT_N: "2" }, run: 1 });
    expect(again).toMatchObject({ status: "started", run: 2, env_vars: { MODE: "full", INPUT_N: "2" } });
    expect(again.jobs.map((j) => [j.key, j.status])).toEqual([
      ["a", "finished"],
      ["b", "dispatched"],
      ["c", "waiting_for_prerequisites"],
      ["d", "finished"],
    ]);
    expect(again.result).toEqual({ a: { v: "a@1" }, d: { v: "d@1" } });
    // Durable: the record holds the run and the env, and the flow is out of the finished indexes.
    expect(await w.redis.exec(["HMGET", w.keys.flow(ctx, first.id), "run", "env_vars", "status"])).toEqual([
      "2",
      JSON.stringify({ MODE: "full", INPUT_N: "2" }),
      "started",
    ]);
    expect(await w.redis.exec(["ZSCORE", w.keys.flowsByStatus(ctx, "finished"), String(first.id)])).toBeNull();
    expect(await w.redis.exec(["ZSCORE", w.keys.ended(ctx, "finished"), `flow:${first.id}`])).toBeNull();

    // The object forgets everything: rebuilt from Redis, it still is run 2 with the new env.
    await evictDurableObject(w.flowStub(ctx, first.id).stub);
    expect(await client.loadFlow(ctx, first.id)).toMatchObject({ run: 2, env_vars: { INPUT_N: "2" } });
    const [rb] = await runJobs(1);
    expect(rb).toMatchObject({ name: "b", attempt: 2, env: { INPUT_N: "2", MODE: "full", DEP_A_V: "a@1" } });
    const [rc] = await runJobs(1);
    expect(rc).toMatchObject({ name: "c", attempt: 2, env: { INPUT_N: "2", DEP_B_V: "b@2" } });

    const done = await client.loadFlow(ctx, first.id);
    expect([done.status, done.run]).toEqual(["finished", 2]);
    expect(done.result).toEqual({ a: { v: "a@1" }, b: { v: "b@2" }, c: { v: "c@2" }, d: { v: "d@1" } });
    expect(await w.redis.exec(["ZSCORE", w.keys.flowsByStatus(ctx, "finished"), String(first.id)])).not.toBeNull();

    // The stream: run 1 untagged, then flow.rerun saying what, then run 2's events tagged.
    const stream = await streamOf(first.id);
    const at = stream.findIndex((e) => e.type === "flow.rerun");
    expect(stream[at]).toMatchObject({ run: 2, jobs: [b, c], from_job_id: b, env_changed: ["INPUT_N"] });
    expect(stream.slice(0, at).filter((e) => e.run !== undefined)).toEqual([]);
    const later = stream.slice(at);
    expect(later.filter((e) => e.run !== 2)).toEqual([]);
    expect(later.filter((e) => e.job_id === a)).toEqual([]);
    expect(later.map((e) => e.type)).toContain("flow.finished");
    expect(stream.filter((e) => e.type === "flow.finished").map((e) => e.run)).toEqual([undefined, 2]);
  });

  it("takes a repeated request once: 409 naming the run, and nothing changes", async () => {
    const first = await finishedFlow();
    const ask = { from: idOf(first, "c"), run: 1 };
    await client.rerunFlow(ctx, first.id, ask);
    await runJobs(1);
    const before = { flow: await flowHash(first.id), seq: (await client.loadFlow(ctx, first.id)).last_seq };
    const twice = await failure(client.rerunFlow(ctx, first.id, ask));
    expect([twice.status, twice.code, twice.problem.flow_status, twice.problem.run]).toEqual([
      409,
      "conflict",
      "finished",
      2,
    ]);
    expect(twice.problem.detail).toBe(
      `flow ${first.id} is at run 2, not 1: it was re-run since (a repeated request, or another's)`,
    );
    expect({ flow: await flowHash(first.id), seq: (await client.loadFlow(ctx, first.id)).last_seq }).toEqual(before);
    // JSON-RPC: the same method with the run as it is now re-runs it (run 3), from a name.
    const rpc = await client.rpc<FlowView>("flow.rerun", { context_id: ctx, id: first.id, from: "c", run: 2 });
    expect([rpc.status, rpc.run]).toEqual(["started", 3]);
    const replay = await failure(client.rpc("flow.rerun", { context_id: ctx, id: first.id, from: "c", run: 2 }));
    expect([replay.rpcCode, replay.status, replay.problem.run]).toEqual([-32009, 409, 3]);
  });

  it("refuses what does not fit: a running flow, an unknown job, from without run, an env past its limit", async () => {
    const flow = await client.submitFlow(ctx, {
      start: true,
      env_vars: { BIG: "x".repeat(40_000) },
      jobs: [sh("a"), sh("b", ["a"])],
    });
    const running = await failure(client.rerunFlow(ctx, flow.id, { from: "a", run: 1 }));
    expect([running.status, running.problem.flow_status, running.problem.detail]).toEqual([
      409,
      "started",
      `flow ${flow.id} is started: it can be re-run from a job once it ended (cancel it first)`,
    ]);
    await runJobs(2);
    const unknown = await failure(client.rerunFlow(ctx, flow.id, { from: "nope", run: 1 }));
    expect([unknown.status, unknown.problem.field]).toEqual([400, "body.from"]);
    expect(unknown.problem.detail).toBe(`body.from: flow ${flow.id} has no job named "nope"`);
    const noRun = await failure(client.rerunFlow(ctx, flow.id, { from: "a" }));
    expect([noRun.status, noRun.problem.field]).toEqual([400, "body.run"]);
    const badName = await failure(client.rerunFlow(ctx, flow.id, { from: "b", run: 1, env_vars: { "1X": "y" } }));
    expect([badName.status, (badName.problem.field as string).startsWith("body.env_vars")]).toEqual([400, true]);
    const big = await failure(
      client.rerunFlow(ctx, flow.id, { from: "b", run: 1, env_vars: { MORE: "y".repeat(30_000) } }),
    );
    expect([big.status, big.problem.field, big.problem.limit]).toEqual([400, "body.env_vars", 65_536]);
    expect(big.problem.detail).toMatch(
      /^body\.env_vars: the flow's env with these over it would be 68\.\d KiB, over the limit of 64 KiB/,
    );
    // A finished flow without from: a plain re-run is for failed flows; the answer says what to give.
    const plain = await failure(client.rerunFlow(ctx, flow.id));
    expect(plain.problem.detail).toBe(
      `flow ${flow.id} is finished: only a failed one can be re-run (or one that ended, from a job: give \`from\`)`,
    );
    // None of it changed the flow or used message ids.
    const view = await client.loadFlow(ctx, flow.id);
    expect([view.status, view.run, Object.keys(view.env_vars)]).toEqual(["finished", 1, ["BIG"]]);
  });

  it("re-runs a failed flow from its failures with changed env (no from, no run needed)", async () => {
    const flow = await client.submitFlow(ctx, { start: true, env_vars: { N: "0" }, jobs: [sh("a"), sh("b", ["a"])] });
    const [a] = await runner.leaseSome();
    if (!a) throw new Error("nothing leased");
    await runner.fail(a, "N is 0");
    const again = await client.rerunFlow(ctx, flow.id, { env_vars: { N: "1" } });
    expect([again.status, again.run, again.env_vars]).toEqual(["started", 2, { N: "1" }]);
    const ran = await runJobs(2);
    expect(ran.map((r) => [r.name, r.attempt, r.env.N])).toEqual([
      ["a", 2, "1"],
      ["b", 1, "1"],
    ]);
    expect((await client.loadFlow(ctx, flow.id)).status).toBe("finished");
  });
});
