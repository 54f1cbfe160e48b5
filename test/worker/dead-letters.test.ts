import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { readConfig } from "../../functions/core/config.js";
import { storeFor } from "../../functions/core/store.js";
import type { CoordinatorClient } from "../../shared/client/index.js";
import type { DeadLetter } from "../../shared/model/index.js";
import { DEAD_LETTERS_MAX, planCommit } from "../../shared/store/index.js";
import { eventually } from "../support/eventually.js";
import { flowOf, shJob, stepsThrough } from "./flow-fixtures.js";
import { BASE, failure, testWorker, type TestWorker } from "./harness.js";
import { PullRunner } from "./pull-runner.js";

// Dead letters can be deleted (admins; idempotent, as deleting a schedule is), and a context
// keeps at most its cap of them: the oldest dropped first, counted, in both scripts that write
// one (commitFlow for a job out of retries, addDeadLetter for an unreadable report).

const w = testWorker("dead-letters");
/** The same Worker deployed with DEAD_LETTERS_MAX = 2 (its Durable Objects keep the default). */
const capped = testWorker("dead-letters-capped", { DEAD_LETTERS_MAX: "2" });
afterAll(async () => {
  await w.cleanup();
  await capped.cleanup();
});

let admin: CoordinatorClient;
let reader: CoordinatorClient;
let readerId: number;

beforeAll(async () => {
  admin = (await w.newActor()).client;
  const r = await w.newActor();
  reader = r.client;
  readerId = r.actor.id;
});

const failing = (name: string) => ({
  start: true,
  jobs: [{ name, script: `exit 1`, script_type: "sh" as const, retries: 0 }],
});

/** Runs a flow of one job that fails at once (no retries left): one dead letter of kind job. */
async function failFlow(client: CoordinatorClient, runner: PullRunner, ctx: number, name: string): Promise<number> {
  const flow = await client.submitFlow(ctx, failing(name));
  const [d] = await runner.leaseSome(1);
  if (!d) throw new Error("nothing leased");
  await runner.fail(d, `${name} failed`);
  expect((await client.loadFlow(ctx, flow.id)).status).toBe("error");
  return flow.id;
}

/** Sets a context's `retention` field as stored (the raw JSON the scripts read). */
function setRetention(t: TestWorker, ctx: number, raw: string): Promise<unknown> {
  return t.redis.exec(["HSET", t.keys.context(ctx), "retention", raw]);
}

/** How many letters the context dropped past its cap (its counters hash). */
async function dropped(t: TestWorker, ctx: number): Promise<number> {
  return Number(
    (await t.redis.exec<string | null>(["HGET", t.keys.contextCounters(ctx), "dead_letters_dropped"])) ?? 0,
  );
}

/** The context's sample of a /metrics family. */
async function metric(t: TestWorker, name: string, ctx: number): Promise<number | undefined> {
  const text = await (await t.fetch(new Request(`${BASE}/metrics`))).text();
  const line = new RegExp(`^${name}\\{context="${ctx}"\\} (\\d+)$`, "m").exec(text);
  return line ? Number(line[1]) : undefined;
}

const byFlow = (letters: DeadLetter[]) => letters.map((l) => l.flow_id).sort((a, b) => a - b);

describe("deleting a dead letter", () => {
  it("takes it out of the list and the index (admins only), and deleting it again answers the same", async () => {
    const ctx = (await admin.createContext({ readers: [readerId] })).id;
    const runner = await PullRunner.register(w, admin, ctx);
    const first = await failFlow(admin, runner, ctx, "one");
    await failFlow(admin, runner, ctx, "two");
    const before = await admin.listDeadLetters(ctx);
    expect(before.total).toBe(2);
    const letter = before.items.find((l) => l.flow_id === first) as DeadLetter;

    expect((await failure(reader.deleteDeadLetter(ctx, letter.id))).status).toBe(403);
    expect(await reader.loadDeadLetter(ctx, letter.id)).toEqual(letter);

    const res = await admin.request("DELETE", `/v1/contexts/${ctx}/deadletters/${encodeURIComponent(letter.id)}`);
    expect(res).toBeUndefined(); // 204, no body
    expect((await failure(admin.loadDeadLetter(ctx, letter.id))).status).toBe(404);
    const after = await admin.listDeadLetters(ctx);
    expect(after.total).toBe(1);
    expect(after.items.map((l) => l.id)).not.toContain(letter.id);
    expect(await w.redis.exec(["ZSCORE", w.keys.deadLetterIndex(ctx), letter.id])).toBeNull();

    // A repeat (a retried request, a letter already dropped): the same answer, nothing else goes.
    await admin.deleteDeadLetter(ctx, letter.id);
    await admin.deleteDeadLetter(ctx, "no:such:letter");
    expect((await admin.listDeadLetters(ctx)).total).toBe(1);
    // A deletion is not a drop past the cap.
    expect(await dropped(w, ctx)).toBe(0);
  });

  it("deadletter.delete over JSON-RPC answers as the route does, repeat included", async () => {
    const ctx = (await admin.createContext({ readers: [readerId] })).id;
    const runner = await PullRunner.register(w, admin, ctx);
    await failFlow(admin, runner, ctx, "rpc");
    const [letter] = (await admin.listDeadLetters(ctx)).items;
    if (!letter) throw new Error("no dead letter");
    const refused = await failure(reader.rpc("deadletter.delete", { context_id: ctx, id: letter.id }));
    expect(refused.rpcCode).toBe(-32003);
    expect(await admin.rpc("deadletter.delete", { context_id: ctx, id: letter.id })).toEqual({ deleted: true });
    expect(await admin.rpc("deadletter.delete", { context_id: ctx, id: letter.id })).toEqual({ deleted: true });
    expect((await admin.listDeadLetters(ctx)).total).toBe(0);
    const bad = await failure(admin.rpc("deadletter.delete", { context_id: ctx, id: "" }));
    expect([bad.rpcCode, bad.problem.field]).toEqual([-32602, "params.id"]);
  });
});

describe("the cap on a context's dead letters", () => {
  it("drops the oldest first when a flow's job runs out of retries past the context's own cap (retention), counted in /metrics", async () => {
    const ctx = (await admin.createContext()).id;
    const runner = await PullRunner.register(w, admin, ctx);
    await setRetention(w, ctx, JSON.stringify({ dead_letters: 2 }));
    const flows = [];
    for (const name of ["a", "b"]) flows.push(await failFlow(admin, runner, ctx, name));
    expect(await dropped(w, ctx)).toBe(0);
    expect(await metric(w, "coordinator_dead_letters_dropped_total", ctx)).toBe(0);

    for (const name of ["c", "d"]) flows.push(await failFlow(admin, runner, ctx, name));
    const page = await admin.listDeadLetters(ctx);
    expect(page.total).toBe(2);
    expect(byFlow(page.items)).toEqual(flows.slice(2));
    expect(await w.redis.exec(["HLEN", w.keys.deadLetters(ctx)])).toBe(2);
    expect(await dropped(w, ctx)).toBe(2);
    expect(await metric(w, "coordinator_dead_letters_dropped_total", ctx)).toBe(2);
    expect(await metric(w, "coordinator_dead_letters", ctx)).toBe(2);
  });

  it("drops the oldest first on the addDeadLetter path (unreadable reports), past the deployment's DEAD_LETTERS_MAX", async () => {
    const client = (await capped.newActor()).client;
    const ctx = (await client.createContext()).id;
    const runner = await PullRunner.register(capped, client, ctx);
    await client.submitFlow(ctx, failing("p"));
    const [d] = await runner.leaseSome(1);
    if (!d) throw new Error("nothing leased");
    const payloads = async () => (await client.listDeadLetters(ctx)).items.filter((l) => l.kind === "payload");
    const sent: string[] = [];
    for (const n of [1, 2, 3]) {
      const marker = `exploded-${n}`;
      expect(await runner.report(d, "result", { status: marker })).toMatchObject({ status: 400 });
      sent.push(marker);
      // Written after the answer; its id holds the time in ms, so the next one waits a little.
      await eventually(
        async () => ((await payloads()).some((l) => l.payload?.includes(marker)) ? true : undefined),
        10_000,
        20,
        `payload ${n}`,
      );
      await new Promise((r) => setTimeout(r, 5));
    }
    const kept = await eventually(
      async () => ((await dropped(capped, ctx)) === 1 ? payloads() : undefined),
      10_000,
      20,
      "the first payload dropped",
    );
    expect(kept.map((l) => /exploded-\d/.exec(l.payload ?? "")?.[0]).sort()).toEqual(sent.slice(1));
    expect(await metric(capped, "coordinator_dead_letters_dropped_total", ctx)).toBe(1);

    // The context's own cap overrides the deployment's (both ways); an unreadable one does not.
    await setRetention(capped, ctx, JSON.stringify({ dead_letters: 3 }));
    for (const marker of ["exploded-4", "exploded-5"]) {
      await runner.report(d, "result", { status: marker });
      await eventually(
        async () => ((await payloads()).some((l) => l.payload?.includes(marker)) ? true : undefined),
        10_000,
        20,
        marker,
      );
      await new Promise((r) => setTimeout(r, 5));
    }
    expect((await client.listDeadLetters(ctx)).total).toBe(3);
    expect(await dropped(capped, ctx)).toBe(2);
    await setRetention(capped, ctx, "{not json");
    await runner.report(d, "result", { status: "exploded-6" });
    await eventually(
      async () => ((await dropped(capped, ctx)) === 4 ? true : undefined),
      10_000,
      20,
      "back to the deployment's cap",
    );
    const last = await payloads();
    expect(last.map((l) => /exploded-\d/.exec(l.payload ?? "")?.[0]).sort()).toEqual(["exploded-5", "exploded-6"]);
  });

  it("commitFlow keeps the deployment's cap it is planned with, and a replayed commit drops nothing twice", async () => {
    const store = storeFor(w.env);
    const contextId = 900;
    const T = Date.now();
    const plans = [1, 2, 3].map((id) => {
      // A caller of its own per flow, so the flows' messages (numbered per caller) are apart.
      const { steps } = stepsThrough({ ...flowOf(contextId, [shJob(1, "a")], { callerId: 10 + id }), id }, [
        { type: "start", at: T },
        { type: "assigned", job: 1, attempt: 1, runner: 4, at: T + 1 },
        { type: "failed", job: 1, attempt: 1, runner: 4, error: "boom", at: T + 2, random: 0.5 },
      ]);
      expect(steps.flatMap((s) => s.effects).some((e) => e.type === "deadLetter")).toBe(true);
      return planCommit(store.keys, steps, T + id, 2);
    });
    for (const plan of plans) {
      await store.flows.commit(plan);
      await store.flows.commit(plan); // run again after an unknown outcome: skipped, nothing dropped
    }
    const page = await store.deadLetters.list(contextId, 0, 10);
    expect(page.items.map((l) => l.id)).toEqual(["3:1:1", "2:1:1"]);
    expect(await dropped(w, contextId)).toBe(1);
    // addDeadLetter with a letter that is there already (a replay): nothing written, nothing dropped.
    await setRetention(w, contextId, JSON.stringify({ dead_letters: 2 }));
    await store.deadLetters.add(page.items[1] as DeadLetter);
    expect(await dropped(w, contextId)).toBe(1);
    expect((await store.deadLetters.list(contextId, 0, 10)).items).toEqual(page.items);
  });

  it("is read from DEAD_LETTERS_MAX (default 10000) into every Store; a bad value is refused, naming it", () => {
    expect(DEAD_LETTERS_MAX).toBe(10_000);
    expect(storeFor(w.env).deadLetters.max).toBe(10_000);
    expect(readConfig(capped.env).deadLettersMax).toBe(2);
    expect(storeFor(capped.env).deadLetters.max).toBe(2);
    for (const bad of ["0", "-3", "many", "1.5"]) {
      expect(() => storeFor({ ...w.env, DEAD_LETTERS_MAX: bad })).toThrow(/DEAD_LETTERS_MAX/);
      expect(() => readConfig({ ...w.env, DEAD_LETTERS_MAX: bad })).toThrow(/DEAD_LETTERS_MAX/);
    }
  });
});
