import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { actorKeyId } from "../../shared/auth/index.js";
import type { CoordinatorClient } from "../../shared/client/index.js";
import type { TemplateFileInput } from "../../shared/flow/index.js";
import { TEMPLATE_LIMITS, type FlowView } from "../../shared/model/index.js";
import { eventually } from "../support/eventually.js";
import { failure, signed, testWorker } from "./harness.js";

// Flow templates through the real Worker in workerd, over Redis: versions (numbered, immutable,
// a repeated PUT making none), the limits and bad input answered with problems naming the field,
// permissions, starting a flow with inputs (defaults, type errors, ${inputs.x} in env and a
// wait's key, a when over inputs), its Idempotency-Key, JSON-RPC, and delete.

const w = testWorker("templates");
afterAll(() => w.cleanup());

let admin: Awaited<ReturnType<typeof w.newActor>>;
let reader: Awaited<ReturnType<typeof w.newActor>>;
let client: CoordinatorClient;
let ctx: number;

beforeAll(async () => {
  admin = await w.newActor();
  reader = await w.newActor();
  client = admin.client;
  ctx = (await client.createContext({ readers: [reader.actor.id] })).id;
});

const hello = (text = "hello"): TemplateFileInput => ({
  jobs: [{ name: "hello", script: `echo ${text}`, script_type: "sh" }],
});

/**
 * An order: wait for its payment (the key is the `order` input), then a sleep that runs only in
 * `fast` mode with a limit over 3 (its `when`), and one that always runs; env from the inputs.
 */
const order: TemplateFileInput = {
  description: "an order paid, then shipped",
  inputs: {
    order: { type: "string", description: "the order's id" },
    mode: { type: "string", default: "slow" },
    limit: { type: "number", default: 5 },
    notify: { type: "boolean", required: false },
  },
  env_vars: { LABEL: "order ${inputs.order}" },
  jobs: [
    { name: "paid", wait: { event: "order.paid", key: "order-${inputs.order}", timeout: 300 } },
    { name: "fast", depends: ["paid"], when: 'inputs.mode == "fast" && int(inputs.limit) > 3', sleep: 0 },
    { name: "done", depends: ["paid"], sleep: 0, env_vars: { MODE: "${inputs.mode}" } },
  ],
};

const flowEnd = (contextId: number, flowId: number) =>
  eventually(
    async () => {
      const view = await client.loadFlow(contextId, flowId);
      return view.status === "finished" || view.status === "error" ? view : undefined;
    },
    20_000,
    50,
    `the end of flow ${flowId}`,
  );

const jobOf = (view: FlowView, name: string) => view.jobs.find((j) => j.name === name);

describe("versions", () => {
  it("numbers versions from 1, makes none for the latest's file again, and keeps each as it was", async () => {
    const first = await client.templates.put(ctx, "greet", hello());
    expect(first).toMatchObject({ name: "greet", version: 1, created: true, jobs: 1, inputs: [] });
    // The same file (even written differently: defaults spelled out) is the latest: no version.
    const again = await client.templates.put(ctx, "greet", {
      jobs: [{ name: "hello", script: "echo hello", script_type: "sh", retries: 0, needs: "all_finished" }],
    });
    expect(again).toMatchObject({ version: 1, created: false, digest: first.digest, created_at: first.created_at });
    const second = await client.templates.put(ctx, "greet", { ...hello("again"), description: "says it again" });
    expect(second).toMatchObject({ version: 2, created: true, description: "says it again" });

    const view = await client.templates.get(ctx, "greet");
    expect(view).toMatchObject({ name: "greet", latest: 2, oldest: 1, kept: 2, description: "says it again" });
    expect(view.versions.map((v) => v.version)).toEqual([2, 1]);
    expect(view.versions[1]).toEqual({ ...first, created: undefined, name: undefined });
    const one = await client.templates.version(ctx, "greet", 1);
    expect((one.file.jobs as { script: string }[])[0]?.script).toBe("echo hello");
    expect((await client.templates.version(ctx, "greet")).version).toBe(2);
    const missing = await failure(client.templates.version(ctx, "greet", 9));
    expect([missing.status, missing.problem.detail]).toEqual([
      404,
      "template version 9 of greet in context " + ctx + " (it keeps 1 to 2) does not exist",
    ]);
    expect((await failure(client.templates.get(ctx, "nope"))).status).toBe(404);
    const page = await client.templates.list(ctx);
    expect(page.items.find((t) => t.name === "greet")).toMatchObject({ latest: 2, kept: 2 });
  });

  it("keeps the newest 50 versions, drops the oldest, and never gives a number twice, a delete included", async () => {
    for (let i = 1; i <= TEMPLATE_LIMITS.versionsKept + 1; i++) await client.templates.put(ctx, "many", hello(`v${i}`));
    const view = await client.templates.get(ctx, "many");
    expect([view.oldest, view.latest, view.kept, view.versions.length]).toEqual([2, 51, 50, 50]);
    expect((await failure(client.templates.version(ctx, "many", 1))).status).toBe(404);
    expect((await client.templates.version(ctx, "many", 2)).file.jobs).toMatchObject([{ script: "echo v2" }]);

    await client.templates.delete(ctx, "many");
    await client.templates.delete(ctx, "many"); // gone already: the same answer
    expect((await failure(client.templates.get(ctx, "many"))).status).toBe(404);
    expect((await client.templates.list(ctx)).items.map((t) => t.name)).not.toContain("many");
    expect((await client.templates.put(ctx, "many", hello())).version).toBe(52);
    await client.templates.delete(ctx, "many");
  });
});

describe("limits and bad input", () => {
  const put = async (name: string, body: unknown) => {
    const response = await w.fetch(
      await signed("PUT", `/v1/contexts/${ctx}/templates/${name}`, admin.jwk, actorKeyId(admin.actor.id), body),
    );
    return { status: response.status, problem: (await response.json()) as { field?: string; detail?: string } };
  };

  it("refuses a name that is not one, inputs not declared, job ids and a cycle, naming the field", async () => {
    expect(await put("bad%20name", hello())).toMatchObject({ status: 400, problem: { field: "param.name" } });
    expect(await put("x".repeat(65), hello())).toMatchObject({ status: 400, problem: { field: "param.name" } });
    const undeclared = await put("t", { jobs: [{ name: "w", wait: { event: "e", key: "${inputs.who}" } }] });
    expect(undeclared).toMatchObject({ status: 400, problem: { field: "body.jobs.0.wait.key" } });
    expect(await put("t", { jobs: [{ id: 5, name: "a", script: "true", script_type: "sh" }] })).toMatchObject({
      status: 400,
      problem: { field: "body.jobs.0.id" },
    });
    const typed = await put("t", { inputs: { n: { type: "number", default: "3" } }, ...hello() });
    expect(typed).toMatchObject({ status: 400, problem: { field: "body.inputs.n.default" } });
    const cycle = await put("t", {
      jobs: [
        { name: "a", script: "true", script_type: "sh", depends: ["b"] },
        { name: "b", script: "true", script_type: "sh", depends: ["a"] },
      ],
    });
    expect(cycle.status).toBe(400);
    expect(cycle.problem.detail).toMatch(/a → b → a|b → a → b/);
    expect(await put("t", { jobs: [{ name: "a", script: "true", script_type: "sh", runner_id: 999 }] })).toMatchObject({
      status: 400,
      problem: { field: "body.jobs.0.runner_id" },
    });
    expect((await failure(client.templates.get(ctx, "t"))).status).toBe(404); // nothing was stored
  });

  it(`refuses a ${TEMPLATE_LIMITS.perContext + 1}st template with 409, and still takes versions of those there`, async () => {
    const full = (await client.createContext()).id;
    await client.templates.put(full, "kept", hello());
    // The context's index as if it held the most: the script counts it.
    const others = Array.from({ length: TEMPLATE_LIMITS.perContext - 1 }, (_, i) => ["0", `filler-${i}`]).flat();
    await w.redis.exec(["ZADD", w.keys.templateIndex(full), ...others]);
    const refused = await failure(client.templates.put(full, "one-more", hello()));
    expect([refused.status, refused.code]).toEqual([409, "conflict"]);
    expect(refused.problem.detail).toContain(`holds ${TEMPLATE_LIMITS.perContext} templates`);
    expect((await client.templates.put(full, "kept", hello("v2"))).version).toBe(2);
  });

  it("lets readers read templates, and only admins put, start and delete them", async () => {
    await client.templates.put(ctx, "readable", hello());
    expect((await reader.client.templates.get(ctx, "readable")).latest).toBe(1);
    expect((await reader.client.templates.version(ctx, "readable")).version).toBe(1);
    for (const call of [
      () => reader.client.templates.put(ctx, "readable", hello("no")),
      () => reader.client.templates.start(ctx, "readable"),
      () => reader.client.templates.delete(ctx, "readable"),
    ]) {
      const refused = await failure(call());
      expect([refused.status, refused.problem.needed]).toEqual([403, ["admins"]]);
    }
  });
});

describe("starting a flow from a template", () => {
  let version: number;
  beforeAll(async () => {
    version = (await client.templates.put(ctx, "order", order)).version;
  });

  it("refuses inputs it does not declare, of the wrong type, or missing, naming each", async () => {
    const missing = await failure(client.templates.start(ctx, "order", { inputs: { limit: "many", other: 1 } }));
    expect(missing.status).toBe(400);
    expect(missing.problem.errors).toEqual([
      {
        field: "body.inputs.other",
        message: "the template declares no input other (it declares order, mode, limit, notify)",
      },
      { field: "body.inputs.order", message: "required (string)" },
      { field: "body.inputs.limit", message: 'must be a number, not the string "many"' },
    ]);
    expect((await failure(client.templates.start(ctx, "absent"))).status).toBe(404);
    expect((await failure(client.templates.start(ctx, "order", { version: 99, inputs: { order: "1" } }))).status).toBe(
      404,
    );
  });

  it("puts the inputs into the flow's env, its wait's key and its when, and keeps where it came from", async () => {
    const view = await client.templates.start(ctx, "order", { inputs: { order: "42", mode: "fast" } });
    expect(view.template).toEqual({ name: "order", version });
    expect(view.env_vars).toEqual({ LABEL: "order 42", INPUT_ORDER: "42", INPUT_MODE: "fast", INPUT_LIMIT: "5" });
    expect(jobOf(view, "paid")).toMatchObject({ status: "started", wait: { key: "order-42" } });
    const sent = await client.sendEvent(ctx, { name: "order.paid", key: "order-42", data: {} });
    expect(sent.resumed).toBe(1);
    const end = await flowEnd(ctx, view.id);
    expect(end.jobs.map((j) => [j.name, j.status])).toEqual([
      ["paid", "finished"],
      ["fast", "finished"],
      ["done", "finished"],
    ]);
    // The record keeps it too: a listing reads records, not the object.
    const listed = (await client.listFlows(ctx, { limit: 500 })).items.find((f) => f.id === view.id);
    expect(listed?.template).toEqual({ name: "order", version });
  });

  it("applies the defaults: the when is false in slow mode", async () => {
    const view = await client.templates.start(ctx, "order", { inputs: { order: "43" } });
    expect(view.env_vars.INPUT_MODE).toBe("slow");
    await client.sendEvent(ctx, { name: "order.paid", key: "order-43", data: {} });
    const end = await flowEnd(ctx, view.id);
    expect(jobOf(end, "fast")).toMatchObject({
      status: "skipped",
      skip_reason: expect.stringContaining("when is false"),
    });
    expect(end.status).toBe("finished");
  });

  it("starts the version asked for, and not at once with start: false", async () => {
    await client.templates.put(ctx, "order", { ...order, description: "v2" });
    const view = await client.templates.start(ctx, "order", { version, inputs: { order: "44" }, start: false });
    expect([view.template, view.status, view.started_at]).toEqual([
      { name: "order", version },
      "dispatched",
      undefined,
    ]);
    const started = await client.startFlow(ctx, view.id);
    expect(started.status).toBe("started");
    expect((await client.templates.start(ctx, "order", { inputs: { order: "45" } })).template?.version).toBe(
      version + 1,
    );
  });

  it("answers the first flow to a start repeated under its Idempotency-Key, and 422 to the key with other inputs", async () => {
    const key = { idempotencyKey: "order-46" };
    const first = await client.templates.start(ctx, "order", { inputs: { order: "46" } }, key);
    const again = await client.templates.start(ctx, "order", { inputs: { order: "46" } }, key);
    expect(again.id).toBe(first.id);
    const other = await failure(client.templates.start(ctx, "order", { inputs: { order: "47" } }, key));
    expect([other.status, other.code]).toEqual([422, "idempotency-key-reused"]);
  });

  it("takes a signed start once: sent again, it is a replay and makes no second flow", async () => {
    const request = await signed(
      "POST",
      `/v1/contexts/${ctx}/templates/order/flows`,
      admin.jwk,
      actorKeyId(admin.actor.id),
      { inputs: { order: "49" } },
    );
    const before = (await client.listFlows(ctx, { limit: 500 })).total;
    const first = await w.fetch(request.clone());
    expect(first.status).toBe(201);
    const again = await w.fetch(request);
    expect([again.status, ((await again.json()) as { type: string }).type]).toEqual([401, "/problems/nonce-replayed"]);
    expect((await client.listFlows(ctx, { limit: 500 })).total).toBe(before + 1);
  });

  it("is the same over JSON-RPC", async () => {
    const put = await client.rpc<{ version: number; created: boolean }>("template.put", {
      context_id: ctx,
      name: "rpc",
      ...hello("over rpc"),
    });
    expect(put).toMatchObject({ version: 1, created: true });
    const got = await client.rpc<{ file: { jobs: { script: string }[] } }>("template.get", {
      context_id: ctx,
      name: "rpc",
    });
    expect(got.file.jobs[0]?.script).toBe("echo over rpc");
    const versions = await client.rpc<{ versions: unknown[] }>("template.versions", { context_id: ctx, name: "rpc" });
    expect(versions.versions).toHaveLength(1);
    const listed = await client.rpc<{ items: { name: string }[] }>("template.list", { context_id: ctx });
    expect(listed.items.map((t) => t.name)).toContain("rpc");
    const flow = await client.rpc<FlowView>("template.start", {
      context_id: ctx,
      name: "order",
      inputs: { order: "48" },
      idempotency_key: "rpc-48",
    });
    expect(flow.template?.name).toBe("order");
    const bad = await failure(client.rpc("template.start", { context_id: ctx, name: "order", inputs: {} }));
    expect([bad.rpcCode, bad.problem.field]).toEqual([-32602, "body.inputs.order"]);
    expect(await client.rpc("template.delete", { context_id: ctx, name: "rpc" })).toEqual({ deleted: true });
  });
});

describe("a schedule of a template", () => {
  const nap: TemplateFileInput = {
    inputs: { who: { type: "string" } },
    env_vars: { WHO: "${inputs.who}" },
    jobs: [{ name: "nap", sleep: 0 }],
  };
  /** A second later than now: two triggers within one second are one fire. */
  const nextSecond = () => new Promise((r) => setTimeout(r, 1100 - (Date.now() % 1000)));

  it("starts the latest version at each fire, or the one it names, with its inputs", async () => {
    await client.templates.put(ctx, "nap", nap);
    const latest = await client.schedules.create(ctx, {
      from_template: { name: "nap", inputs: { who: "cron" } },
      interval_seconds: 3600,
      overlap: "allow_all",
    });
    expect(latest.from_template).toEqual({ name: "nap", inputs: { who: "cron" } });
    expect(latest.template).toBeUndefined();
    const pinned = await client.schedules.create(ctx, {
      from_template: { name: "nap", version: 1, inputs: { who: "pinned" } },
      interval_seconds: 3600,
      overlap: "allow_all",
    });
    const first = await client.schedules.trigger(ctx, latest.id);
    expect(first.outcome).toBe("started");
    const flow = await client.loadFlow(ctx, first.flow_id as number);
    expect([flow.template, flow.env_vars]).toEqual([
      { name: "nap", version: 1 },
      { WHO: "cron", INPUT_WHO: "cron" },
    ]);

    await client.templates.put(ctx, "nap", { ...nap, description: "version 2" });
    await nextSecond();
    const second = await client.schedules.trigger(ctx, latest.id);
    expect((await client.loadFlow(ctx, second.flow_id as number)).template).toEqual({ name: "nap", version: 2 });
    const third = await client.schedules.trigger(ctx, pinned.id);
    expect((await client.loadFlow(ctx, third.flow_id as number)).template).toEqual({ name: "nap", version: 1 });

    // The template gone, a fire fails saying so (and the schedule goes on).
    await client.templates.delete(ctx, "nap");
    await nextSecond();
    const gone = await client.schedules.trigger(ctx, latest.id);
    expect(gone.outcome).toBe("failed");
    expect(gone.reason).toContain("template nap in context");
    for (const s of [latest, pinned]) await client.schedules.delete(ctx, s.id);
  });

  it("refuses a template that is not there, a version it does not keep, inputs that do not fit, and both kinds", async () => {
    await client.templates.put(ctx, "nap2", nap);
    const create = (extra: object) =>
      failure(client.schedules.create(ctx, { interval_seconds: 3600, ...extra } as never));
    const absent = await create({ from_template: { name: "absent" } });
    expect([absent.status, absent.problem.field]).toEqual([400, "body.from_template.name"]);
    const version = await create({ from_template: { name: "nap2", version: 7, inputs: { who: "x" } } });
    expect([version.status, version.problem.field]).toEqual([400, "body.from_template.version"]);
    const inputs = await create({ from_template: { name: "nap2", inputs: { who: 3 } } });
    expect([inputs.status, inputs.problem.field]).toEqual([400, "body.from_template.inputs.who"]);
    const both = await create({ from_template: { name: "nap2" }, template: hello() });
    expect([both.status, both.problem.field]).toEqual([400, "body.template"]);
    const neither = await create({});
    expect([neither.status, neither.problem.field]).toEqual([400, "body.template"]);
  });
});
