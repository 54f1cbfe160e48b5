import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { readFlowFile } from "../../cli/flowfile.js";
import { actorKeyId, generateKeyPair } from "../../shared/auth/index.js";
import { ApiError, CoordinatorClient, signerFromJwk } from "../../shared/client/index.js";
import type { FlowSubmissionInput } from "../../shared/flow/index.js";
import type { FlowStreamEvent, FlowView } from "../../shared/model/index.js";
import { eventually } from "../support/eventually.js";
import { flowEnd } from "../support/flow-runs.js";
import { registerReferenceRunner, type RunnerProcess } from "../support/runner-process.js";
import { startTestWorker, type TestWorker } from "../support/test-worker.js";

/**
 * Sagas end to end: examples/saga.yaml and flows like it on a real `wrangler dev` Worker over
 * the test stack's Redis, their python and sh jobs (and compensations) run by the reference
 * runner as real processes. Each test has a context of its own with its own runner.
 */

const root = path.resolve(import.meta.dirname, "../..");
const tmp = mkdtempSync(path.join(tmpdir(), "flow-saga-test-"));
const runners: RunnerProcess[] = [];
let worker: TestWorker;
let admin: CoordinatorClient;

beforeAll(async () => {
  worker = await startTestWorker("saga", tmp);
  const jwk = await generateKeyPair();
  const anonymous = new CoordinatorClient({ baseUrl: worker.url });
  const actorId = (await anonymous.registerActor(jwk)).id;
  admin = anonymous.as(await signerFromJwk(jwk, actorKeyId(actorId)));
});

afterAll(async () => {
  await Promise.all(runners.map((r) => r.kill()));
  await worker?.stop();
  rmSync(tmp, { recursive: true, force: true });
});

/** A fresh context with a push reference runner of sh and python jobs, started. */
async function contextWithRunner(): Promise<number> {
  const { id } = await admin.createContext();
  const runner = await registerReferenceRunner(admin, id, {
    url: worker.url,
    dir: tmp,
    mode: "push",
    started: runners,
  });
  await runner.start();
  return id;
}

/** examples/saga.yaml as flowc reads it, with its env_vars overridden by `env`. */
function saga(env: Record<string, string> = {}): FlowSubmissionInput {
  const body = readFlowFile(path.join("examples", "saga.yaml"), root).body as FlowSubmissionInput;
  return { ...body, env_vars: { ...body.env_vars, ...env }, start: true };
}

/** Every event of a flow that ended, from its first to its end. */
async function eventsOf(contextId: number, flowId: number): Promise<FlowStreamEvent[]> {
  const events: FlowStreamEvent[] = [];
  const stop = new AbortController();
  const ends = new Set(["flow.finished", "flow.error", "flow.compensated", "flow.compensation_failed"]);
  for await (const event of admin.flowEvents(contextId, flowId, { signal: stop.signal })) {
    events.push(event);
    if (ends.has(event.type)) break;
  }
  stop.abort();
  return events;
}

const byKey = (view: FlowView) => new Map(view.jobs.map((j) => [j.key, j]));

describe("examples/saga.yaml", () => {
  it("fails at ship and unwinds: charge's compensation, then book's; ship's has nothing to undo", async () => {
    const contextId = await contextWithRunner();
    const submitted = await admin.submitFlow(contextId, saga());
    const view = await flowEnd(admin, contextId, submitted.id);
    expect(view.status).toBe("compensated");
    expect(view.error).toMatchObject({ name: "ship", reason: "exit code 4" });
    const jobs = byKey(view);
    expect(jobs.get("ship")?.status).toBe("error");
    expect(jobs.get("ship.compensate")).toMatchObject({ status: "skipped", compensates: jobs.get("ship")?.id });
    expect(jobs.get("ship.compensate")?.skip_reason).toMatch(/nothing to undo: ship did not finish/);
    // Each compensation got what its job finished with.
    expect(jobs.get("charge.compensate")).toMatchObject({ status: "finished", result: { refund: "RF-PAY-77" } });
    expect(jobs.get("book.compensate")).toMatchObject({
      status: "finished",
      result: { cancelled: `BK-${submitted.id}` },
    });
    expect(view.compensating_at).toBeGreaterThanOrEqual(view.started_at ?? 0);

    // The stream tells the unwinding, in order, each compensation's events naming its job.
    const events = await eventsOf(contextId, submitted.id);
    const at = (type: string, key?: string) =>
      events.findIndex((e) => e.type === type && (key === undefined || e.job_id === jobs.get(key)?.id));
    expect(at("job.error", "ship")).toBeLessThan(at("flow.compensating"));
    expect(at("flow.compensating")).toBeLessThan(at("job.ready", "charge.compensate"));
    expect(at("job.finished", "charge.compensate")).toBeLessThan(at("job.ready", "book.compensate"));
    expect(at("job.finished", "book.compensate")).toBe(events.length - 2);
    expect(events.at(-1)).toMatchObject({ type: "flow.compensated", status: "compensated" });
    const unwinding = events.filter((e) => e.job_id === jobs.get("book.compensate")?.id);
    expect(unwinding.length).toBeGreaterThan(2);
    expect(unwinding.every((e) => e.compensates === jobs.get("book")?.id)).toBe(true);
    expect(events.filter((e) => e.job_id === jobs.get("book")?.id).every((e) => e.compensates === undefined)).toBe(
      true,
    );
  });

  it("with stock, finishes: no compensation runs, each is skipped as not needed", async () => {
    const contextId = await contextWithRunner();
    const submitted = await admin.submitFlow(contextId, saga({ STOCK: "3" }));
    const view = await flowEnd(admin, contextId, submitted.id);
    expect(view.status).toBe("finished");
    const compensations = view.jobs.filter((j) => j.compensates !== undefined);
    expect(compensations).toHaveLength(3);
    for (const job of compensations)
      expect(job).toMatchObject({ status: "skipped", attempt: 0, skip_reason: "not needed: the flow finished" });
    expect(view.result).toMatchObject({ ship: { parcel: `PK-${submitted.id}` } });
  });
});

describe("a saga's unwinding", () => {
  it("starts with a cancel that asks to compensate; the same cancel again changes nothing", async () => {
    const contextId = await contextWithRunner();
    const flow = await admin.submitFlow(contextId, {
      start: true,
      jobs: [
        {
          name: "reserve",
          script_type: "sh",
          script: 'echo "seat=7" > "$RESULT_FILE"',
          // Slow enough that the flow is still unwinding when the cancel comes again.
          compensate: { script_type: "sh", script: 'sleep 3; echo "freed=$COMPENSATE_SEAT" > "$RESULT_FILE"' },
        },
        {
          name: "work",
          script_type: "sh",
          depends: ["reserve"],
          timeout: 60,
          script: "sleep 30",
          compensate: { script_type: "sh", script: "echo never" },
        },
      ],
    });
    await eventually(
      async () =>
        (await admin.loadFlow(contextId, flow.id)).jobs.find((j) => j.key === "work")?.status === "started" ||
        undefined,
      20_000,
      100,
      "work to start",
    );
    const cancelled = await admin.cancelFlow(contextId, flow.id, "the customer left", true);
    expect(cancelled.status).toBe("compensating");
    expect(cancelled.error).toEqual({ job: 0, reason: "cancelled: the customer left" });
    const again = await admin.cancelFlow(contextId, flow.id, "the customer left", true);
    expect(again.status).toBe("compensating");
    const view = await flowEnd(admin, contextId, flow.id);
    expect(view.status).toBe("compensated");
    const jobs = byKey(view);
    // work was stopped mid-run: it did not finish, so nothing of it is undone.
    expect(jobs.get("work")).toMatchObject({ status: "error", error: "cancelled: the customer left" });
    expect(jobs.get("work.compensate")?.status).toBe("skipped");
    expect(jobs.get("reserve.compensate")).toMatchObject({ status: "finished", result: { freed: "7" } });
    await expect(admin.cancelFlow(contextId, flow.id, "late", true)).rejects.toMatchObject({
      status: 409,
    });
  });

  it("that fails ends compensation_failed, dead-lettered and named; a re-run finishes it", async () => {
    const contextId = await contextWithRunner();
    const marker = path.join(tmp, `refund-${contextId}`);
    const flow = await admin.submitFlow(contextId, {
      start: true,
      jobs: [
        {
          name: "book",
          script_type: "sh",
          script: "true",
          compensate: { script_type: "sh", script: 'echo "unbooked=yes" > "$RESULT_FILE"' },
        },
        {
          name: "charge",
          script_type: "sh",
          depends: ["book"],
          script: "true",
          // Fails its first run (the gateway is down), works once run again.
          compensate: {
            script_type: "sh",
            script: `if [ ! -e ${marker} ]; then touch ${marker}; echo "gateway down" >&2; exit 5; fi`,
          },
        },
        { name: "ship", script_type: "sh", depends: ["charge"], script: "exit 4" },
      ],
    });
    const failed = await flowEnd(admin, contextId, flow.id);
    expect(failed.status).toBe("compensation_failed");
    expect(failed.error).toMatchObject({ name: "ship", failed_compensations: ["charge.compensate"] });
    const jobs = byKey(failed);
    expect(jobs.get("charge.compensate")).toMatchObject({ status: "error", error: "exit code 5" });
    // The unwinding stops there: book's compensation waits for the refund.
    expect(jobs.get("book.compensate")).toMatchObject({
      status: "skipped",
      skip_reason: "not run: compensation charge.compensate failed",
    });
    const letters = await admin.listDeadLetters(contextId);
    expect(letters.items.map((l) => l.job_key)).toContain("charge.compensate");

    const again = await admin.rerunFlow(contextId, flow.id);
    expect(again.status).toBe("compensating");
    expect(again.error?.failed_compensations).toBeUndefined();
    const view = await flowEnd(admin, contextId, flow.id);
    expect(view.status).toBe("compensated");
    expect(byKey(view).get("book.compensate")).toMatchObject({ status: "finished", result: { unbooked: "yes" } });
    expect(byKey(view).get("ship")?.status).toBe("error");
    await expect(admin.rerunFlow(contextId, flow.id)).rejects.toBeInstanceOf(ApiError);
  });

  it("refuses a compensate that is not a job's script fields, and a job outside a flow with one", async () => {
    const contextId = await contextWithRunner();
    const refused = (body: unknown) =>
      admin.submitFlow(contextId, body as FlowSubmissionInput).then(
        () => undefined,
        (error: ApiError) => error,
      );
    const noType = await refused({ jobs: [{ script: "x", script_type: "sh", compensate: { script: "y" } }] });
    expect(noType).toMatchObject({ status: 400 });
    expect(JSON.stringify(noType?.problem)).toContain("jobs.0.compensate.script_type");
    const clash = await refused({
      jobs: [
        { name: "a", script: "x", script_type: "sh", compensate: { script: "y", script_type: "sh" } },
        { name: "a.compensate", script: "x", script_type: "sh" },
      ],
    });
    expect(clash).toMatchObject({ status: 400 });
    expect(JSON.stringify(clash?.problem)).toContain("jobs.1.name");
    const lone = { job: { script: "x", script_type: "sh", compensate: { script: "y", script_type: "sh" } } };
    const loneRefused = await admin.request("POST", `/v1/contexts/${contextId}/jobs`, lone).then(
      () => undefined,
      (error: ApiError) => error,
    );
    expect(loneRefused).toMatchObject({ status: 400 });
    expect(JSON.stringify(loneRefused?.problem)).toContain("job.compensate");
  });
});
