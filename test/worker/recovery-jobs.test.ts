import { evictDurableObject } from "cloudflare:test";
import { afterAll, beforeAll, beforeEach, describe, expect, it } from "vitest";
import type { CoordinatorClient, JobWithStatus } from "../../shared/client/index.js";
import type { DeliveryPayload, FlowView } from "../../shared/model/index.js";
import { failure, testWorker } from "./harness.js";
import { PullRunner } from "./pull-runner.js";

// Cancel and re-run of a job outside any flow (POST /v1/contexts/{c}/jobs): the same rules, on the
// same machine, as a flow's, through REST, JSON-RPC and the typed client.

const w = testWorker("recovery-jobs");
afterAll(() => w.cleanup());

let admin: CoordinatorClient;
let reader: CoordinatorClient;
let readerId: number;
let ctx: number;
let runner: PullRunner;

beforeAll(async () => {
  admin = (await w.newActor()).client;
  const r = await w.newActor();
  reader = r.client;
  readerId = r.actor.id;
});
beforeEach(async () => {
  ctx = (await admin.createContext({ readers: [readerId] })).id;
  runner = await PullRunner.register(w, admin, ctx);
});

/** Submits a job outside any flow (started unless `start` is false). */
async function submitJob(name: string, start = true): Promise<JobWithStatus> {
  const answer = (await admin.request("POST", `/v1/contexts/${ctx}/jobs`, {
    job: { name, script: `echo ${name}`, script_type: "sh" },
    start,
  })) as { job: JobWithStatus };
  return answer.job;
}

/** The one delivery the runner leases now. */
async function leaseOne(): Promise<DeliveryPayload> {
  const [d] = await runner.leaseSome();
  if (!d) throw new Error("nothing leased");
  return d;
}

/** The job's record and message hashes as stored, and the figures waiting: what a refused command must leave alone. */
async function footprint(job: JobWithStatus) {
  return {
    record: await w.redis.exec<string[]>(["HGETALL", w.keys.job(ctx, job.caller_id, job.id)]),
    figures: await w.redis.exec<number>(["LLEN", w.keys.contextFigures(ctx)]),
    inbox: await w.redis.exec<number>(["LLEN", w.keys.msgIn(ctx, job.caller_id)]),
  };
}

describe("cancel of a job outside any flow", () => {
  it("stops a running job at its runner; a repeated cancel is refused 409 and changes nothing", async () => {
    const job = await submitJob("long");
    const d = await leaseOne();
    await runner.report(d, "ack");
    await runner.report(d, "started");
    const refused = await failure(reader.cancelJob(ctx, job.caller_id, job.id));
    expect([refused.status, refused.problem.needed]).toEqual([403, ["admins"]]);

    const cancelled = await admin.cancelJob(ctx, job.caller_id, job.id, "not needed");
    expect(cancelled).toMatchObject({ id: job.id, status: "error", error: "cancelled: not needed" });
    expect(await runner.report(d, "heartbeat")).toMatchObject({ status: 409 });
    expect(await runner.lease()).toEqual([]);
    const slots = await w.redis.exec<number>(["ZCARD", w.keys.runnerSlots(ctx, runner.id)]);
    expect(slots).toBe(0);

    const before = await footprint(job);
    const again = await failure(admin.cancelJob(ctx, job.caller_id, job.id, "again"));
    expect([again.status, again.code, again.problem.job_status]).toEqual([409, "conflict", "error"]);
    expect(again.problem.detail).toBe(
      `job ${job.id} of actor ${job.caller_id} already ended (error): nothing is left to cancel`,
    );
    expect(await footprint(job)).toEqual(before);
    expect(
      (await admin.request("GET", `/v1/contexts/${ctx}/jobs/${job.caller_id}/${job.id}`)) as JobWithStatus,
    ).toMatchObject({ status: "error", error: "cancelled: not needed" });
  });

  it("cancels a job never started, and refuses one that finished (409 naming its status)", async () => {
    const idle = await submitJob("idle", false);
    expect((await admin.cancelJob(ctx, idle.caller_id, idle.id)).status).toBe("error");

    const done = await submitJob("done");
    await runner.finish(await leaseOne(), { v: "1" });
    const before = await footprint(done);
    const refused = await failure(admin.cancelJob(ctx, done.caller_id, done.id));
    expect([refused.status, refused.problem.job_status]).toEqual([409, "finished"]);
    expect(await footprint(done)).toEqual(before);
    const rpc = await failure(admin.rpc("job.cancel", { context_id: ctx, caller_id: done.caller_id, id: done.id }));
    expect([rpc.rpcCode, rpc.status, rpc.problem.job_status]).toEqual([-32009, 409, "finished"]);
  });

  it("refuses a job of a flow (cancel the flow) and a job that does not exist", async () => {
    const flow = (await admin.request("POST", `/v1/contexts/${ctx}/flows`, {
      jobs: [{ name: "in-flow", script: "true", script_type: "sh" }],
    })) as FlowView;
    const jobId = flow.jobs[0]?.id ?? 0;
    const inFlow = await failure(admin.cancelJob(ctx, flow.caller_id, jobId));
    expect([inFlow.status, inFlow.problem.detail]).toEqual([
      409,
      `job ${jobId} belongs to flow ${flow.id}: cancel the flow`,
    ]);
    expect((await failure(admin.rerunJob(ctx, flow.caller_id, jobId))).problem.detail).toBe(
      `job ${jobId} belongs to flow ${flow.id}: rerun the flow`,
    );
    expect((await failure(admin.cancelJob(ctx, flow.caller_id, 99_999))).status).toBe(404);
    const bad = await failure(
      admin.request("POST", `/v1/contexts/${ctx}/jobs/${flow.caller_id}/${jobId}/cancel`, { reason: "" }),
    );
    expect([bad.status, bad.problem.field]).toEqual([400, "body.reason"]);
  });
});

describe("re-run of a job outside any flow", () => {
  it("runs a failed job again with fresh retries, once; re-running a job that did not fail is 409", async () => {
    const job = await submitJob("flaky");
    const first = await leaseOne();
    await runner.fail(first, "exit code 5");
    expect(
      (await admin.rpc<JobWithStatus>("job.load", { context_id: ctx, caller_id: job.caller_id, id: job.id })).status,
    ).toBe("error");

    const again = await admin.rerunJob(ctx, job.caller_id, job.id);
    expect(again).toMatchObject({ id: job.id, live: { status: "dispatched", attempt: 2 } });
    expect(again.error).toBeUndefined();
    // A re-run asked twice (a retry): the second finds the job running again, and is refused.
    const twice = await failure(admin.rerunJob(ctx, job.caller_id, job.id));
    expect([twice.status, twice.problem.job_status]).toEqual([409, "started"]);
    const second = await leaseOne();
    expect([second.attempt, second.job_id]).toEqual([2, job.id]);
    expect(second.message.id).not.toBe(first.message.id);
    expect(await runner.report(first, "result", { status: "finished", result: {} })).toMatchObject({ status: 409 });
    await runner.finish(second, { v: "2" });
    const finished = (await admin.request(
      "GET",
      `/v1/contexts/${ctx}/jobs/${job.caller_id}/${job.id}`,
    )) as JobWithStatus;
    expect(finished).toMatchObject({ status: "finished", result: { v: "2" } });
    expect(await runner.lease()).toEqual([]);

    const done = await failure(admin.rerunJob(ctx, job.caller_id, job.id));
    expect([done.status, done.problem.job_status]).toEqual([409, "finished"]);
    expect(done.problem.detail).toBe(
      `job ${job.id} of actor ${job.caller_id} is finished: only a failed one can be re-run`,
    );
    const rpc = await failure(admin.rpc("job.rerun", { context_id: ctx, caller_id: job.caller_id, id: job.id }));
    expect([rpc.rpcCode, rpc.problem.job_status]).toEqual([-32009, "finished"]);
  });

  it("re-runs a cancelled job through JSON-RPC, and the re-run survives the object losing its memory", async () => {
    const job = await submitJob("again", false);
    const cancelled = await admin.rpc<JobWithStatus>("job.cancel", {
      context_id: ctx,
      caller_id: job.caller_id,
      id: job.id,
      reason: "wait",
    });
    expect(cancelled).toMatchObject({ status: "error", error: "cancelled: wait" });
    const rerun = await admin.rpc<JobWithStatus>("job.rerun", {
      context_id: ctx,
      caller_id: job.caller_id,
      id: job.id,
    });
    expect(rerun.live?.status).toBe("dispatched");
    // A fresh instance rebuilds the job from Redis: it is running again, not the error it was.
    await evictDurableObject(w.jobStub(ctx, job.caller_id, job.id).stub);
    const reloaded = (await admin.request(
      "GET",
      `/v1/contexts/${ctx}/jobs/${job.caller_id}/${job.id}`,
    )) as JobWithStatus;
    expect(reloaded.live?.status).toBe("dispatched");
    await runner.finish(await leaseOne(), { v: "ok" });
    expect(
      ((await admin.request("GET", `/v1/contexts/${ctx}/jobs/${job.caller_id}/${job.id}`)) as JobWithStatus).status,
    ).toBe("finished");
  });
});
