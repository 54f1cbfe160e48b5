import { afterAll, beforeAll, beforeEach, describe, expect, it } from "vitest";
import { actorKeyId, runnerKeyId } from "../../shared/auth/index.js";
import type { CoordinatorClient } from "../../shared/client/index.js";
import type { FlowSubmissionInput } from "../../shared/flow/index.js";
import type { FlowDag, FlowView, Message } from "../../shared/model/index.js";
import { failure, signed, testWorker } from "./harness.js";
import { jobName, PullRunner } from "./pull-runner.js";

const w = testWorker("flows");
afterAll(() => w.cleanup());

let admin: Awaited<ReturnType<typeof w.newActor>>;
let client: CoordinatorClient;
let ctx: number;
let runner: PullRunner;

beforeAll(async () => {
  admin = await w.newActor();
  client = admin.client;
  ctx = (await client.createContext()).id;
  runner = await PullRunner.register(w, client, ctx);
});

const submit = (body: FlowSubmissionInput) => client.submitFlow(ctx, body);
const refused = (body: FlowSubmissionInput) => failure(submit(body));

/** Leases and finishes every job it can, round after round, until the flow ends. */
async function runToEnd(flowId: number, fail: Record<string, string> = {}): Promise<{ view: FlowView; ran: string[] }> {
  const ran: string[] = [];
  for (let round = 0; round < 50; round++) {
    const view = await client.loadFlow(ctx, flowId);
    if (view.status === "finished" || view.status === "error") return { view, ran };
    for (const d of await runner.lease()) {
      const name = jobName(d);
      ran.push(name);
      if (fail[name]) await runner.fail(d, fail[name] as string);
      else await runner.finish(d, { out: name, inputs: d.message.job[0]?.env_vars.FLOW_INPUTS ?? "" });
    }
    await new Promise((r) => setTimeout(r, 20));
  }
  throw new Error("the flow did not end");
}

const sh = (name: string, depends: (string | number)[] = [], extra: Record<string, unknown> = {}) => ({
  name,
  script: `echo ${name}`,
  script_type: "sh" as const,
  depends,
  ...extra,
});

describe("submission", () => {
  it("refuses a cycle, naming it", async () => {
    const e = await refused({ jobs: [sh("a", ["c"]), sh("b", ["a"]), sh("c", ["b"])] });
    expect(e.status).toBe(400);
    expect(e.problem.field).toBe("body.jobs.0.depends");
    expect(e.problem.detail).toContain("a → c → b → a");
  });

  it("refuses unknown dependencies, duplicates and limits, naming the job", async () => {
    expect((await refused({ jobs: [sh("a", ["nope"])] })).problem.field).toBe("body.jobs.0.depends.0");
    expect((await refused({ jobs: [sh("a"), sh("a")] })).problem.field).toBe("body.jobs.1.name");
    expect(
      (
        await refused({
          jobs: [
            { ...sh("a"), id: 5 },
            { ...sh("b"), id: 5 },
          ],
        })
      ).problem.field,
    ).toBe("body.jobs.1.id");
    expect((await refused({ jobs: Array.from({ length: 10_001 }, (_, i) => sh(`j${i}`)) })).problem.field).toBe(
      "body.jobs",
    );
    expect((await refused({ jobs: [{ ...sh("a"), script: "x".repeat(17_000) }] })).problem.field).toBe(
      "body.jobs.0.script",
    );
    expect((await refused({ jobs: [{ ...sh("a"), runner_id: 99_999 }] })).problem.field).toBe("body.jobs.0.runner_id");
    expect((await refused({ jobs: [] })).problem.field).toBe("body.jobs");
  });

  it("stores all or nothing: a taken job id refuses the whole flow", async () => {
    const first = await submit({ jobs: [{ ...sh("a"), id: 7001 }] });
    const before = await client.listFlows(ctx, { limit: 500 });
    const e = await refused({ jobs: [sh("x"), { ...sh("b"), id: 7001 }] });
    expect(e.status).toBe(409);
    const after = await client.listFlows(ctx, { limit: 500 });
    expect(after.total).toBe(before.total);
    expect(first.jobs[0]?.id).toBe(7001);
  });

  it("refuses a replayed submission, its nonce spent by the reservation, and creates nothing for it", async () => {
    const before = (await client.listFlows(ctx)).total;
    const request = await signed("POST", `/v1/contexts/${ctx}/flows`, admin.jwk, actorKeyId(admin.actor.id), {
      jobs: [sh("replayed")],
    });
    const replay = request.clone();
    expect((await w.fetch(request)).status).toBe(201);
    const second = await w.fetch(replay);
    expect(second.status).toBe(401);
    expect(await second.json()).toMatchObject({ type: "/problems/nonce-replayed" });
    expect((await client.listFlows(ctx)).total).toBe(before + 1);
  });

  it("answers a repeated Idempotency-Key with the first flow", async () => {
    // Raw requests: the first answer is 201 Created, the repeated one 200.
    const send = async () =>
      w.fetch(
        await signed(
          "POST",
          `/v1/contexts/${ctx}/flows`,
          admin.jwk,
          actorKeyId(admin.actor.id),
          { jobs: [sh("once")] },
          { headers: { "idempotency-key": "order-42" } },
        ),
      );
    const first = await send();
    const second = await send();
    expect([first.status, second.status]).toEqual([201, 200]);
    const firstId = ((await first.json()) as FlowView).id;
    expect(((await second.json()) as FlowView).id).toBe(firstId);
    // The typed client sends the header too; another key is another flow.
    expect((await admin.client.submitFlow(ctx, { jobs: [sh("once")] }, { idempotencyKey: "order-42" })).id).toBe(
      firstId,
    );
    expect((await admin.client.submitFlow(ctx, { jobs: [sh("once")] }, { idempotencyKey: "order-43" })).id).not.toBe(
      firstId,
    );
  });
});

describe("running", () => {
  beforeEach(async () => {
    ctx = (await client.createContext()).id;
    runner = await PullRunner.register(w, client, ctx);
  });

  it("runs a diamond, passing results on, and shows the DAG", async () => {
    const flow = await submit({
      env_vars: { COLOR: "blue" },
      jobs: [sh("a"), sh("b", ["a"]), sh("c", ["a"], { env_vars: { COLOR: "red" } }), sh("d", ["b", "c"])],
    });
    expect(flow.status).toBe("dispatched");
    expect(await runner.lease()).toEqual([]); // not started: nothing to take
    const started = await client.startFlow(ctx, flow.id);
    expect(started.status).toBe("started");
    expect(started.jobs.map((j) => j.status)).toEqual([
      "dispatched",
      "waiting_for_prerequisites",
      "waiting_for_prerequisites",
      "waiting_for_prerequisites",
    ]);
    expect((await client.startFlow(ctx, flow.id)).status).toBe("started"); // again: harmless

    const envs: Record<string, Record<string, string>> = {};
    for (let round = 0; round < 20 && Object.keys(envs).length < 4; round++) {
      for (const d of await runner.leaseSome()) {
        envs[jobName(d)] = d.message.job[0]?.env_vars ?? {};
        await runner.finish(d, { out: jobName(d) });
      }
    }
    const view = await client.loadFlow(ctx, flow.id);
    expect(view.status).toBe("finished");
    expect(view.result).toEqual({ a: { out: "a" }, b: { out: "b" }, c: { out: "c" }, d: { out: "d" } });
    expect(envs.b?.COLOR).toBe("blue");
    expect(envs.c?.COLOR).toBe("red");
    expect(envs.d?.DEP_B_OUT).toBe("b");
    expect(JSON.parse(envs.d?.FLOW_INPUTS ?? "{}")).toEqual({ b: { out: "b" }, c: { out: "c" } });
    const dag = await client.flowDag(ctx, flow.id);
    expect(dag.nodes.map((n) => [n.key, n.status])).toEqual([
      ["a", "finished"],
      ["b", "finished"],
      ["c", "finished"],
      ["d", "finished"],
    ]);
    expect(dag.edges).toHaveLength(4);
  });

  it("errors the flow on a failing job, naming it, without starting its dependents", async () => {
    const flow = await submit({
      start: true,
      jobs: [sh("a"), sh("bad", ["a"]), sh("after", ["bad"]), sh("side", ["a"])],
    });
    const { view, ran } = await runToEnd(flow.id, { bad: "exit code 3" });
    expect(view.status).toBe("error");
    expect(view.error).toMatchObject({ name: "bad", reason: "exit code 3" });
    expect(ran).not.toContain("after");
    expect(view.jobs.find((j) => j.key === "after")).toMatchObject({
      status: "error",
      error: "not run: dependency bad failed",
    });
  });

  it("takes duplicated, reordered and late webhooks without changing the outcome", async () => {
    const flow = await submit({ start: true, jobs: [sh("a"), sh("b", ["a"])] });
    const [d] = await runner.leaseSome();
    if (!d) throw new Error("nothing leased");
    // Result before ack and started (reordered), then everything again (duplicated).
    expect(await runner.report(d, "result", { status: "finished", result: { v: "1" } })).toMatchObject({
      outcome: "applied",
    });
    expect(await runner.report(d, "result", { status: "finished", result: { v: "1" } })).toMatchObject({
      outcome: "duplicate",
    });
    expect(await runner.report(d, "result", { status: "error", error: "late contradiction" })).toMatchObject({
      status: 409,
      code: "stale-attempt",
    });
    expect(await runner.report(d, "started")).toMatchObject({ status: 409 });
    expect(await runner.report(d, "ack")).toMatchObject({ status: 409 });
    expect(await runner.report({ ...d, attempt: 2 }, "result", { status: "finished" })).toMatchObject({
      status: 409,
      code: "stale-attempt",
    });
    const view = await client.loadFlow(ctx, flow.id);
    expect(view.jobs.map((j) => j.status)).toEqual(["finished", "dispatched"]);
    expect(view.result).toEqual({ a: { v: "1" } });
  });

  it("refuses a report from another runner and a replayed signed report", async () => {
    const other = await PullRunner.register(w, client, ctx, ["python"]);
    const flow = await submit({ start: true, jobs: [sh("solo")] });
    const [d] = await runner.leaseSome();
    if (!d) throw new Error("nothing leased");
    expect(await other.report(d, "result", { status: "finished" })).toMatchObject({
      status: 403,
      code: "not-your-job",
    });
    const request = await signed("POST", new URL(d.callbacks.ack).pathname, runner.jwk, runnerKeyId(ctx, runner.id), {
      attempt: d.attempt,
    });
    const replay = request.clone();
    expect((await w.fetch(request)).status).toBe(200);
    const second = await w.fetch(replay);
    expect(second.status).toBe(401);
    expect(await second.json()).toMatchObject({ type: "/problems/nonce-replayed" });
    await runner.finish(d);
    expect((await client.loadFlow(ctx, flow.id)).status).toBe("finished");
  });

  it("lists flows by status, a page at a time", async () => {
    for (let i = 0; i < 3; i++) await runToEnd((await submit({ start: true, jobs: [sh(`ok${i}`)] })).id);
    await runToEnd((await submit({ start: true, jobs: [sh("bad")] })).id, { bad: "no" });
    const page = await client.listFlows(ctx, { status: "finished", limit: 2 });
    expect(page.items).toHaveLength(2);
    expect(page.items.every((f) => f.status === "finished")).toBe(true);
    expect(page.next).toBe(2);
    expect(page.total).toBe(3);
    const errors = await client.listFlows(ctx, { status: "error" });
    expect(errors.total).toBe(1);
  });
});

describe("a job outside any flow", () => {
  beforeEach(async () => {
    ctx = (await client.createContext()).id;
    runner = await PullRunner.register(w, client, ctx);
  });

  it("is refused 400 naming job.runner_id when it pins a runner that is not registered", async () => {
    const e = await failure(
      client.request("POST", `/v1/contexts/${ctx}/jobs`, {
        job: { script: "echo hi", script_type: "sh", runner_id: 99_999 },
      }),
    );
    expect([e.status, e.problem.field]).toEqual([400, "body.job.runner_id"]);
  });

  it("is created, run, and its message settled", async () => {
    const created = (await client.request("POST", `/v1/contexts/${ctx}/jobs`, {
      job: { script: "echo hi", script_type: "python" },
      start: true,
    })) as {
      job: { id: number; caller_id: number; flow_id: number; status: string; message_base: number };
    };
    expect(created.job).toMatchObject({ flow_id: 0, status: "dispatched" });
    const [d] = await runner.leaseSome();
    if (!d) throw new Error("nothing leased");
    expect(d.flow_id).toBe(0);
    await runner.report(d, "ack");
    const acked = (await client.request(
      "GET",
      `/v1/contexts/${ctx}/messages/${created.job.caller_id}/${created.job.message_base}`,
    )) as Message;
    expect(acked.status).toBe("acknowledged");
    await runner.finish(d, { answer: "42" });
    const job = (await client.request(
      "GET",
      `/v1/contexts/${ctx}/jobs/${created.job.caller_id}/${created.job.id}`,
    )) as { status: string; result: Record<string, string> };
    expect(job).toMatchObject({ status: "finished", result: { answer: "42" } });
    const message = (await client.request(
      "GET",
      `/v1/contexts/${ctx}/messages/${created.job.caller_id}/${created.job.message_base}`,
    )) as Message;
    expect(message).toMatchObject({ status: "processed", runner_id: runner.id, attempt: 1 });
  });
});

describe("JSON-RPC", () => {
  it("flow.create, flow.start, flow.load, flow.dag, job.create, job.load, message.load", async () => {
    const flow = await client.rpc<FlowView>("flow.create", { context_id: ctx, jobs: [sh("r1"), sh("r2", ["r1"])] });
    expect(flow.status).toBe("dispatched");
    expect((await client.rpc<FlowView>("flow.start", { context_id: ctx, id: flow.id })).status).toBe("started");
    const dag = await client.rpc<FlowDag>("flow.dag", { context_id: ctx, id: flow.id });
    expect(dag.edges).toEqual([{ from: flow.jobs[0]?.id, to: flow.jobs[1]?.id }]);
    await runToEnd(flow.id);
    expect((await client.rpc<FlowView>("flow.load", { context_id: ctx, id: flow.id })).status).toBe("finished");
    const job = await client.rpc<{ id: number; caller_id: number; message_base: number }>("job.create", {
      context_id: ctx,
      job: { script: "true", script_type: "sh" },
    });
    expect(
      (await client.rpc<{ status: string }>("job.load", { context_id: ctx, caller_id: job.caller_id, id: job.id }))
        .status,
    ).toBe("dispatched");
    const first = flow.jobs[0];
    const message = await client.rpc<Message>("message.load", {
      context_id: ctx,
      caller_id: admin.actor.id,
      id: (
        await client.rpc<{ message_base: number }>("job.load", {
          context_id: ctx,
          caller_id: admin.actor.id,
          id: first?.id,
        })
      ).message_base,
    });
    expect(message.status).toBe("processed");
  });
});
