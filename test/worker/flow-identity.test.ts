import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { CoordinatorClient } from "../../shared/client/index.js";
import type { FlowSubmissionInput } from "../../shared/flow/index.js";
import type { Flow, FlowView, Page } from "../../shared/model/index.js";
import { FILTER_WINDOW } from "../../shared/store/index.js";
import { eventually } from "../support/eventually.js";
import { failure, testWorker } from "./harness.js";
import { PullRunner } from "./pull-runner.js";

// Flows have identity, through the real Worker in workerd over Redis: a name and labels kept
// from the submission (or named after a template, told with the schedule that fired it), shown
// on the view and the list, and the list's filters (name, label, status, order) with their
// window and their problems; each listed flow's progress, live while it runs.

const w = testWorker("flow-identity");
afterAll(() => w.cleanup());

let client: CoordinatorClient;
let ctx: number;
beforeAll(async () => {
  client = (await w.newActor()).client;
  ctx = (await client.createContext()).id;
});

const sh = (name: string, depends: string[] = []) => ({ name, script: "true", script_type: "sh" as const, depends });
const submit = (body: Partial<FlowSubmissionInput>) => client.submitFlow(ctx, { jobs: [sh("a")], ...body });
const ids = (page: Page<Flow>) => page.items.map((f) => f.id);

describe("a flow's name and labels", () => {
  it("are kept from the submission, on the view, the record a list gives, and its created event", async () => {
    const flow = await submit({ name: "nightly report", labels: { env: "prod", team: "data" } });
    expect(flow).toMatchObject({ name: "nightly report", labels: { env: "prod", team: "data" } });
    expect((await client.loadFlow(ctx, flow.id)).name).toBe("nightly report");
    const listed = (await client.listFlows(ctx, { name: "nightly report" })).items.find((f) => f.id === flow.id);
    expect(listed).toMatchObject({ name: "nightly report", labels: { env: "prod", team: "data" } });
    const events = client.flowEvents(ctx, flow.id);
    const created = (await events.next()).value;
    await events.return(undefined);
    expect(created).toMatchObject({ type: "flow.created", name: "nightly report", trigger: { kind: "manual" } });
  });

  it("are refused with a problem naming the field and the limit", async () => {
    const long = await failure(submit({ name: "n".repeat(129) }));
    expect(long.status).toBe(400);
    expect(long.problem.field).toBe("body.name");
    expect(long.problem.detail).toContain("at most 128 characters");
    const key = await failure(submit({ labels: { "no spaces": "x" } }));
    expect(key.problem.field).toBe("body.labels.no spaces");
  });

  it("default to the template's name when started from one, unless its file names the flow", async () => {
    await client.templates.put(ctx, "weekly", { jobs: [sh("a")], labels: { kind: "report" } });
    const started = await client.templates.start(ctx, "weekly", { start: false });
    expect(started).toMatchObject({ name: "weekly", labels: { kind: "report" }, template: { name: "weekly" } });
    await client.templates.put(ctx, "titled", { jobs: [sh("a")], name: "the titled one" });
    expect((await client.templates.start(ctx, "titled", { start: false })).name).toBe("the titled one");
  });

  it("of a schedule's flow: its file's name, and the schedule that fired it", async () => {
    const schedule = await client.schedules.create(ctx, {
      template: { jobs: [sh("a")], name: "hourly sync" },
      interval_seconds: 3600,
      paused: true,
    });
    const run = await client.schedules.trigger(ctx, schedule.id);
    const view = await client.loadFlow(ctx, run.flow_id as number);
    expect(view).toMatchObject({ name: "hourly sync", schedule_id: schedule.id });
  });
});

describe("listing flows by name, label and status", () => {
  let flows: FlowView[];
  beforeAll(async () => {
    const other = (await client.createContext()).id;
    const make = (body: Partial<FlowSubmissionInput>) => client.submitFlow(other, { jobs: [sh("a")], ...body });
    flows = [
      await make({ name: "Build web", labels: { env: "prod", team: "web" } }),
      await make({ name: "build api", labels: { env: "dev", team: "api" } }),
      await make({ name: "deploy web", labels: { env: "prod", team: "web" } }),
      await make({}),
      await make({ name: "build docs", labels: { env: "prod" } }),
    ];
    ctx2 = other;
  });
  let ctx2 = 0;
  const list = (query: Parameters<CoordinatorClient["listFlows"]>[1]) => client.listFlows(ctx2, query);
  const id = (i: number) => (flows[i] as FlowView).id;

  it("filters by a part of the name (any case), by labels (key:value, key alone, all of them), newest first", async () => {
    expect(ids(await list({ name: "BUILD" }))).toEqual([id(0), id(1), id(4)]);
    expect(ids(await list({ label: ["env:prod"] }))).toEqual([id(0), id(2), id(4)]);
    expect(ids(await list({ label: ["env:prod", "team"] }))).toEqual([id(0), id(2)]);
    expect(ids(await list({ name: "web", label: ["env:prod"], order: "newest" }))).toEqual([id(2), id(0)]);
    expect(ids(await list({ order: "newest", limit: 2 }))).toEqual([id(4), id(3)]);
    expect(ids(await list({ label: ["env:staging"] }))).toEqual([]);
  });

  it("pages a filtered list by where its look stopped: `next` goes on after the last match", async () => {
    const first = await list({ label: ["env:prod"], limit: 2 });
    expect(ids(first)).toEqual([id(0), id(2)]);
    expect(first.next).toBe(3); // the third flow of the index was the second match
    expect(first.total).toBe(5); // the flows of the index looked through
    const second = await list({ label: ["env:prod"], limit: 2, offset: first.next as number });
    expect(ids(second)).toEqual([id(4)]);
    expect(second.next).toBeUndefined();
  });

  it(`looks through at most ${FILTER_WINDOW} flows a page, saying where to go on`, async () => {
    const crowded = (await client.createContext()).id;
    const body = { jobs: [sh("a")] };
    for (let i = 0; i < FILTER_WINDOW; i += 50)
      await Promise.all(Array.from({ length: 50 }, () => client.submitFlow(crowded, body)));
    const found = await client.submitFlow(crowded, { ...body, name: "needle" });
    const page = await client.listFlows(crowded, { name: "needle" });
    expect(page.items).toEqual([]);
    expect(page.next).toBe(FILTER_WINDOW);
    expect(ids(await client.listFlows(crowded, { name: "needle", offset: page.next as number }))).toEqual([found.id]);
  });

  it("refuses a filter that is not one, a problem naming the query's field", async () => {
    const bad = await failure(list({ label: ["no spaces:x"] }));
    expect(bad.status).toBe(400);
    expect(bad.problem.field).toBe("query.label");
    expect(bad.problem.detail).toContain("not a label filter");
    const many = await failure(list({ label: Array.from({ length: 9 }, (_, i) => `k${i}`) }));
    expect(many.problem.detail).toContain("at most 8 label filters");
    expect((await failure(list({ name: "n".repeat(129) }))).problem.field).toBe("query.name");
  });

  it("is the same over JSON-RPC (flow.list)", async () => {
    const page = await client.rpc<Page<Flow>>("flow.list", { context_id: ctx2, label: ["team:web"], order: "newest" });
    expect(ids(page)).toEqual([id(2), id(0)]);
  });
});

describe("a listed flow's progress", () => {
  it("is every job waiting for a flow not started, live for a running one, kept with its end", async () => {
    const own = (await client.createContext()).id;
    const ownRunner = await PullRunner.register(w, client, own);
    const flow = await client.submitFlow(own, { jobs: [sh("a"), sh("b", ["a"])] });
    const progressOf = async () => (await client.listFlows(own, {})).items.find((f) => f.id === flow.id)?.progress;
    expect(await progressOf()).toMatchObject({ total: 2, dispatched: 2, finished: 0 });
    await client.startFlow(own, flow.id);
    const [first] = await ownRunner.leaseSome(1);
    await ownRunner.finish(first as NonNullable<typeof first>, {});
    expect(await progressOf()).toMatchObject({ total: 2, finished: 1 });
    for (const d of await ownRunner.leaseSome(1)) await ownRunner.finish(d, {});
    await eventually(
      async () => ((await client.loadFlow(own, flow.id)).status === "finished" ? true : undefined),
      10_000,
    );
    const { items } = await client.listFlows(own, { status: "finished" });
    expect(items.find((f) => f.id === flow.id)?.progress).toMatchObject({ total: 2, finished: 2 });
  });
});
