import { evictDurableObject, runDurableObjectAlarm, runInDurableObject } from "cloudflare:test";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { CoordinatorClient } from "../../shared/client/index.js";
import type { FlowState, FlowSubmissionInput, TemplateFileInput } from "../../shared/flow/index.js";
import { MAX_CHILD_DEPTH, type FlowView } from "../../shared/model/index.js";
import { eventually } from "../support/eventually.js";
import { failure, testWorker } from "./harness.js";

// Child flows through the real Worker in workerd, over Redis: a job that starts a flow from a
// template, waits for its end and ends with it; the child's end told to its parent, or found by
// the parent's own look when the telling was lost; a parent's cancel reaching its child; the
// parent's object evicted while its child runs, or dying before its cancel reached the child; the
// bound on nesting.

const w = testWorker("children");
afterAll(() => w.cleanup());

let client: CoordinatorClient;
let ctx: number;

/** The child: waits for `sub.go` with the key its input names, so the test decides when it ends. */
const sub: TemplateFileInput = {
  inputs: { key: { type: "string" } },
  jobs: [{ name: "go", wait: { event: "sub.go", key: "${inputs.key}", timeout: 600 } }],
};

beforeAll(async () => {
  client = (await w.newActor()).client;
  ctx = (await client.createContext()).id;
  await client.templates.put(ctx, "sub", sub);
});

/** A parent: its job `sub` runs the child with `key`, then `after` (no runner: a sleep of 0). */
const parentOf = (key: string): FlowSubmissionInput => ({
  start: true,
  jobs: [
    { name: "sub", flow: { template: "sub", inputs: { key } } },
    { name: "after", depends: ["sub"], sleep: 0 },
  ],
});

const jobOf = (view: FlowView, name: string) => view.jobs.find((j) => j.name === name);

/** The flow's view once its job `sub` knows its child. */
const withChild = (flowId: number) =>
  eventually(
    async () => {
      const view = await client.loadFlow(ctx, flowId);
      return jobOf(view, "sub")?.child_flow_id !== undefined ? view : undefined;
    },
    20_000,
    50,
    `the child of flow ${flowId}`,
  );

const ended = (flowId: number) =>
  eventually(
    async () => {
      const view = await client.loadFlow(ctx, flowId);
      return view.status === "finished" || view.status === "error" ? view : undefined;
    },
    20_000,
    50,
    `the end of flow ${flowId}`,
  );

describe("a child flow", () => {
  it("runs from its template as the parent's caller; the parent's job ends with it, with its result", async () => {
    const parent = await client.submitFlow(ctx, parentOf("k1"));
    const view = await withChild(parent.id);
    const job = jobOf(view, "sub");
    expect(job).toMatchObject({ kind: "flow", status: "started", flow: { template: "sub", inputs: { key: "k1" } } });
    const childId = job?.child_flow_id as number;
    expect(job?.waiting).toMatchObject({ reason: "child", detail: `waiting for child flow ${childId} to end` });
    const child = await client.loadFlow(ctx, childId);
    expect(child).toMatchObject({
      status: "started",
      caller_id: parent.caller_id,
      template: { name: "sub", version: 1 },
      parent: { flow_id: parent.id, job_id: job?.id, attempt: 1, depth: 1 },
    });

    await client.sendEvent(ctx, { id: "go-k1", name: "sub.go", key: "k1", data: { rows: "30" } });
    const done = await ended(parent.id);
    expect(done.status).toBe("finished");
    expect(done.result.sub).toEqual({ child_flow_id: String(childId), "go.rows": "30", "go.event_id": "go-k1" });
    expect(jobOf(done, "sub")).toMatchObject({ status: "finished", child_flow_id: childId });
    expect(jobOf(done, "after")?.status).toBe("finished");
  });

  it("is refused at submission when its template is not in the context, naming the field", async () => {
    const bad = await failure(
      client.submitFlow(ctx, { jobs: [{ name: "x", flow: { template: "nope", inputs: {} } }] }),
    );
    expect(bad.status).toBe(400);
    expect(JSON.stringify(bad.problem)).toContain("body.jobs.0.flow.template");
    const version = await failure(
      client.submitFlow(ctx, { jobs: [{ name: "x", flow: { template: "sub", version: 9 } }] }),
    );
    expect(version.status).toBe(400);
    expect(JSON.stringify(version.problem)).toContain("body.jobs.0.flow.version");
  });

  it("fails its job, naming the child, when the child fails; inputs the template refuses fail it at its start", async () => {
    const parent = await client.submitFlow(ctx, {
      start: true,
      jobs: [{ name: "sub", flow: { template: "sub", inputs: { key: 7 } } }],
    });
    const done = await ended(parent.id);
    expect(jobOf(done, "sub")?.error).toMatch(/^its child flow could not be started: .*inputs\.key/);
  });

  it("ends its parent's job by the parent's own look when the child's telling is lost", async () => {
    const parent = await client.submitFlow(ctx, parentOf("k2"));
    const view = await withChild(parent.id);
    const childId = jobOf(view, "sub")?.child_flow_id as number;
    // The child's object loses its telling (as if evicted between its end's commit and the call).
    await runInDurableObject(w.flowStub(ctx, childId).stub, (instance) => {
      const children = (instance as unknown as { flow: { children: Record<string, unknown> } }).flow.children;
      children["tellParent"] = () => Promise.resolve();
    });
    await client.sendEvent(ctx, { name: "sub.go", key: "k2", data: {} });
    expect((await ended(childId)).status).toBe("finished");
    await new Promise((r) => setTimeout(r, 200));
    expect(jobOf(await client.loadFlow(ctx, parent.id), "sub")?.status).toBe("started");
    // The parent's next look (its deadline, a minute on: given its time rather than waited for).
    const { stub } = w.flowStub(ctx, parent.id);
    await runInDurableObject(stub, async (instance) => {
      const flow = (instance as unknown as { flow: { existing(): FlowState; enqueue(e: unknown): Promise<unknown> } })
        .flow;
      const due = flow.existing().jobs.get(view.jobs[0]?.id as number)?.deadline;
      await flow.enqueue({ type: "deadline", job: view.jobs[0]?.id, attempt: 1, kind: "child", at: due?.at });
    });
    const done = await ended(parent.id);
    expect(done.status).toBe("finished");
    expect(done.result.sub).toMatchObject({ child_flow_id: String(childId) });
  });

  it("is cancelled with its parent", async () => {
    const parent = await client.submitFlow(ctx, parentOf("k3"));
    const childId = jobOf(await withChild(parent.id), "sub")?.child_flow_id as number;
    await client.cancelFlow(ctx, parent.id, "no longer needed");
    const child = await ended(childId);
    expect(child.status).toBe("error");
    expect(child.error?.reason).toContain(`its parent flow ${parent.id} ended its job`);
    const after = await client.loadFlow(ctx, parent.id);
    expect(jobOf(after, "sub")).toMatchObject({ status: "error", child_flow_id: childId });
  });

  it("is cancelled when it runs past its job's flow.timeout, and the job fails saying so", async () => {
    const parent = await client.submitFlow(ctx, {
      start: true,
      jobs: [{ name: "sub", flow: { template: "sub", inputs: { key: "k5" }, timeout: 1 } }],
    });
    const childId = jobOf(await withChild(parent.id), "sub")?.child_flow_id as number;
    // The job's deadline is its timeout's end (a second after its start): the alarm brings it.
    const done = await ended(parent.id);
    expect(jobOf(done, "sub")).toMatchObject({
      status: "error",
      error: `its child flow ${childId} did not end within 1 s (flow.timeout)`,
    });
    const child = await ended(childId);
    expect(child.status).toBe("error");
    expect(child.error?.reason).toContain(`its parent flow ${parent.id} ended its job`);
  });

  it("is cancelled with its parent when the parent's object died before the cancel went out", async () => {
    const parent = await client.submitFlow(ctx, parentOf("k6"));
    const childId = jobOf(await withChild(parent.id), "sub")?.child_flow_id as number;
    // The parent's object carries out nothing its cancel's commit owes the child (as if its
    // isolate died right after the commit: a Worker restarted, a deploy), then loses its memory.
    const { stub } = w.flowStub(ctx, parent.id);
    await runInDurableObject(stub, (instance) => {
      const children = (instance as unknown as { flow: { children: Record<string, unknown> } }).flow.children;
      children["cancel"] = () => Promise.resolve();
    });
    await client.cancelFlow(ctx, parent.id, "no longer needed");
    await evictDurableObject(stub);
    // The cancel was owed durably before the commit: the parent's alarm (5 s on; run now, if it
    // has not rung already) carries it out. Without it, the child would wait for its event.
    await runDurableObjectAlarm(stub);
    const child = await ended(childId);
    expect(child.status).toBe("error");
    expect(child.error?.reason).toContain(`its parent flow ${parent.id} ended its job`);
    // Nothing is left owed: the alarm has nothing more to do for the ended parent.
    await runInDurableObject(stub, async (_instance, state) => {
      expect((await state.storage.list({ prefix: "owed-child-cancel:" })).size).toBe(0);
    });
  });

  it("ends its parent's job after the parent's object was evicted while it ran", async () => {
    const parent = await client.submitFlow(ctx, parentOf("k4"));
    const childId = jobOf(await withChild(parent.id), "sub")?.child_flow_id as number;
    await evictDurableObject(w.flowStub(ctx, parent.id).stub);
    const rebuilt = await client.loadFlow(ctx, parent.id);
    expect(jobOf(rebuilt, "sub")).toMatchObject({ status: "started", child_flow_id: childId });
    await client.sendEvent(ctx, { name: "sub.go", key: "k4", data: { n: "1" } });
    const done = await ended(parent.id);
    expect(done.status).toBe("finished");
    expect(done.result.sub).toMatchObject({ child_flow_id: String(childId), "go.n": "1" });
  });

  it(`nests at most ${MAX_CHILD_DEPTH} deep: a template that starts itself fails at the bound, and each parent with it`, async () => {
    await client.templates.put(ctx, "deep", { jobs: [{ name: "again", flow: { template: "deep" } }] });
    const top = await client.templates.start(ctx, "deep", {});
    const done = await eventually(
      async () => {
        const view = await client.loadFlow(ctx, top.id);
        return view.status === "error" ? view : undefined;
      },
      30_000,
      100,
      "the end of the nested flows",
    );
    expect(jobOf(done, "again")?.error).toMatch(/^child flow \d+ failed: /);
    // Walk down to the deepest: its job never started a child.
    let flow = done;
    for (let depth = 1; depth <= MAX_CHILD_DEPTH; depth++) {
      flow = await client.loadFlow(ctx, jobOf(flow, "again")?.child_flow_id as number);
      expect(flow.parent?.depth).toBe(depth);
    }
    expect(jobOf(flow, "again")).toMatchObject({ status: "error" });
    expect(jobOf(flow, "again")?.child_flow_id).toBeUndefined();
    expect(jobOf(flow, "again")?.error).toContain(`past the limit of ${MAX_CHILD_DEPTH} flows nested`);
  });
});
