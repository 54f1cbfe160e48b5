import { env } from "cloudflare:workers";
import { afterAll, describe, expect, it } from "vitest";
import { ZodError } from "zod";
import { Keys } from "../../shared/keys.js";
import type { Message, RunnerJob } from "../../shared/model/index.js";
import { ConflictError, CorruptRecordError, NotFoundError, Store } from "../../shared/store/index.js";
import { connectRedis } from "../../shared/store/redis.js";
import { deletePrefix, freshPrefix } from "../support/prefix.js";

// Runs inside workerd, as the coordinator does, against real Redis through the REST endpoint.
const prefix = freshPrefix("store");
const redis = connectRedis({ url: env.UPSTASH_REDIS_REST_URL, token: env.UPSTASH_REDIS_REST_TOKEN });
let clock = 1_700_000_000;
const store = new Store(redis, new Keys(prefix), () => clock);

afterAll(async () => {
  await deletePrefix(redis, prefix);
});

const PUBKEY = "11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo";

function jobFields(contextId: number, callerId: number): Omit<RunnerJob, "id" | "created_at" | "updated_at"> {
  return {
    caller_id: callerId,
    context_id: contextId,
    flow_id: 0,
    script: "print('hi')",
    script_type: "python",
    timeout: 60,
    retries: 1,
    env_vars: { A: "1" },
    result: {},
    prerequisites: [],
    depends: [],
    status: "dispatched",
  };
}

describe("actors (global)", () => {
  it("allocates ids, skipping ids callers chose, and refuses a taken id with ConflictError", async () => {
    const chosen = await store.actors.create({ id: 1, pubkey: PUBKEY, address: [] });
    expect(chosen).toEqual({ id: 1, pubkey: PUBKEY, address: [], created_at: clock, updated_at: clock });
    const allocated = await store.actors.create({
      pubkey: PUBKEY,
      address: [{ type: "https", url: "https://a.example/in" }],
    });
    expect(allocated.id).toBe(2);
    await expect(store.actors.create({ id: 2, pubkey: PUBKEY, address: [] })).rejects.toBeInstanceOf(ConflictError);
    expect(await store.actors.load({ id: 2 })).toEqual(allocated);
  });

  it("updates only the patched fields and stamps updated_at", async () => {
    clock += 10;
    const updated = await store.actors.update({ id: 1 }, { address: [{ type: "mycelium", address: "4ab::1" }] });
    expect(updated).toMatchObject({ id: 1, pubkey: PUBKEY, created_at: clock - 10, updated_at: clock });
    expect(await store.actors.load({ id: 1 })).toEqual(updated);
  });

  it("lists through the global index", async () => {
    const page = await store.actors.list({}, 0, 10);
    expect(page.items.map((a) => a.id)).toEqual([1, 2]);
    expect(page.total).toBe(2);
    expect(page.next).toBeUndefined();
  });
});

describe("contexts and runners", () => {
  it("creates a context with allocated id and lists it", async () => {
    const context = await store.contexts.create({ admins: [1], readers: [2], executors: [] });
    expect(context.id).toBeGreaterThan(0);
    expect(await store.contexts.load({ id: context.id })).toEqual(context);
    expect((await store.contexts.list({})).items.map((c) => c.id)).toContain(context.id);
    const raw = await redis.exec<string[]>(["HGETALL", new Keys(prefix).context(context.id)]);
    expect(raw).toContain("[1]");
  });

  it("gives runners the model's default topic runner<id> and keeps them per context", async () => {
    const runner = await store.runners.create({
      context_id: 7,
      pubkey: PUBKEY,
      address: "https://runner.example/jobs",
      topic: "",
      local: false,
      runner_type: "python",
      script_types: ["python", "sh"],
      concurrency: 4,
      deliveries_per_post: 1,
    });
    expect(runner.topic).toBe(`runner${runner.id}`);
    expect(await store.runners.find({ context_id: 8, id: runner.id })).toBeNull();
    const updated = await store.runners.update({ context_id: 7, id: runner.id }, { local: true, concurrency: 8 });
    expect(updated).toMatchObject({ local: true, concurrency: 8, topic: runner.topic });
    // A runner written before deliveries_per_post existed takes one delivery per POST.
    await redis.exec(["HDEL", new Keys(prefix).runner(7, runner.id), "deliveries_per_post"]);
    expect(await store.runners.load({ context_id: 7, id: runner.id })).toMatchObject({ deliveries_per_post: 1 });
    await store.runners.delete({ context_id: 7, id: runner.id });
    await expect(store.runners.load({ context_id: 7, id: runner.id })).rejects.toBeInstanceOf(NotFoundError);
    await expect(store.runners.delete({ context_id: 7, id: runner.id })).rejects.toBeInstanceOf(NotFoundError);
    expect((await store.runners.list({ context_id: 7 })).total).toBe(0);
  });
});

describe("flows, jobs and messages in a context", () => {
  it("numbers jobs per caller and lists them across callers", async () => {
    const a = await store.jobs.create(jobFields(7, 12));
    const b = await store.jobs.create(jobFields(7, 12));
    const c = await store.jobs.create(jobFields(7, 13));
    expect([a.id, b.id, c.id]).toEqual([1, 2, 1]);
    expect(await store.jobs.load({ context_id: 7, caller_id: 13, id: 1 })).toEqual(c);
    const page = await store.jobs.list({ context_id: 7 }, 0, 10);
    expect(page.items.map((j) => `${j.caller_id}:${j.id}`).sort()).toEqual(["12:1", "12:2", "13:1"]);
  });

  it("pages a listing with offset and next", async () => {
    for (let i = 0; i < 5; i++) await store.jobs.create(jobFields(9, 12));
    const first = await store.jobs.list({ context_id: 9 }, 0, 2);
    expect(first.items.map((j) => j.id)).toEqual([1, 2]);
    expect(first).toMatchObject({ total: 5, next: 2 });
    const last = await store.jobs.list({ context_id: 9 }, 4, 2);
    expect(last.items.map((j) => j.id)).toEqual([5]);
    expect(last.next).toBeUndefined();
  });

  it("stores messages with embedded jobs and logs as JSON and reads them back", async () => {
    const job = await store.jobs.create(jobFields(7, 12));
    const id = await store.messages.allocateIds(7, 12);
    const message: Message = {
      id,
      caller_id: 12,
      context_id: 7,
      message: "run it",
      message_type: "job",
      message_format_type: "text",
      timeout: 30,
      timeout_ack: 10,
      timeout_result: 60,
      job: [job],
      // Replies come as plain JSON, not base64 (connectRedis): text beyond ASCII and beyond the
      // BMP comes back as it went in.
      logs: [{ timestamp: 1.5, stream: "stdout", message: "héllo ☃ 😀 中文" }],
      status: "dispatched",
      created_at: clock,
      updated_at: clock,
    };
    await store.messages.post(message);
    expect(await store.messages.load({ context_id: 7, caller_id: 12, id })).toEqual(message);
  });
});

describe("what the store refuses", () => {
  it("validates an update before writing anything", async () => {
    const job = await store.jobs.create(jobFields(10, 1));
    const ref = { context_id: 10, caller_id: 1, id: job.id };
    await expect(store.jobs.update(ref, { status: "bogus" as "started" })).rejects.toBeInstanceOf(ZodError);
    expect((await store.jobs.load(ref)).status).toBe("dispatched");
    await expect(store.jobs.update({ ...ref, id: 999 }, { status: "started" })).rejects.toBeInstanceOf(NotFoundError);
  });

  it("leaves a taken record and its index untouched when a create collides", async () => {
    const job = await store.jobs.create({ ...jobFields(11, 1), id: 50 });
    await expect(
      store.jobs.create({ ...jobFields(11, 1), id: 50, script: "other", status: "started" }),
    ).rejects.toBeInstanceOf(ConflictError);
    expect(await store.jobs.load({ context_id: 11, caller_id: 1, id: 50 })).toEqual(job);
    expect((await store.jobs.list({ context_id: 11 })).total).toBe(1);
  });

  it("reports a corrupt hash as CorruptRecordError naming the key and the fields", async () => {
    const keys = new Keys(prefix);
    const job = await store.jobs.create(jobFields(12, 1));
    const ref = { context_id: 12, caller_id: 1, id: job.id };
    const key = keys.job(12, 1, job.id);

    await redis.exec(["HSET", key, "env_vars", "[1,", "status", "bogus"]);
    const broken = await store.jobs.load(ref).catch((e: unknown) => e);
    expect(broken).toBeInstanceOf(CorruptRecordError);
    expect((broken as CorruptRecordError).key).toBe(key);
    expect((broken as CorruptRecordError).issues.map((i) => i.field)).toEqual(["env_vars"]);

    await redis.exec(["HSET", key, "env_vars", "{}", "created_at", "yesterday"]);
    const issues = await store.jobs.load(ref).then(
      () => [],
      (e: CorruptRecordError) => e.issues,
    );
    expect(issues).toEqual([{ field: "created_at", message: expect.stringContaining("integer") }]);

    await redis.exec(["HSET", key, "created_at", "1"]);
    await redis.exec(["HDEL", key, "caller_id"]);
    const missing = await store.jobs.load(ref).then(
      () => [],
      (e: CorruptRecordError) => e.issues,
    );
    expect(missing.map((i) => i.field).sort()).toEqual(["caller_id", "status"]);
  });
});
