import { runInDurableObject } from "cloudflare:test";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { CoordinatorClient } from "../../shared/client/index.js";
import type { Message } from "../../shared/model/index.js";
import { eventually } from "../support/eventually.js";
import { failure, testWorker, waitUntilPast } from "./harness.js";
import { PullRunner } from "./pull-runner.js";

// Results back to the actor, and messages between actors, inside workerd.

const w = testWorker("messages");
afterAll(() => w.cleanup());

let alice: Awaited<ReturnType<typeof w.newActor>>;
let bob: Awaited<ReturnType<typeof w.newActor>>;
let carol: Awaited<ReturnType<typeof w.newActor>>;
let ctx: number;

beforeAll(async () => {
  [alice, bob, carol] = [await w.newActor(), await w.newActor(), await w.newActor()];
  ctx = (await alice.client.createContext({ readers: [bob.actor.id] })).id;
});

const inboxOf = async (client: CoordinatorClient, pop = false) =>
  ((await client.request("GET", `/v1/contexts/${ctx}/inbox?pop=${pop}`)) as { messages: Message[] }).messages;

/** Polls an inbox until it holds `n` messages (relaying happens just after the answer). */
function waitForInbox(client: CoordinatorClient, n: number): Promise<Message[]> {
  return eventually(
    async () => {
      const messages = await inboxOf(client);
      return messages.length >= n ? messages : undefined;
    },
    10_000,
    20,
    `${n} messages in the inbox`,
  );
}

describe("the result goes back to the actor", () => {
  it("puts a result message in the caller's inbox when a flow ends, and nobody else's", async () => {
    const runner = await PullRunner.register(w, alice.client, ctx);
    const ok = await alice.client.submitFlow(ctx, {
      start: true,
      jobs: [{ name: "a", script: "x", script_type: "sh" }],
    });
    const [d] = await runner.leaseSome();
    if (!d) throw new Error("nothing leased");
    await runner.finish(d, { answer: "42" });
    const bad = await alice.client.submitFlow(ctx, {
      start: true,
      jobs: [{ name: "b", script: "x", script_type: "sh" }],
    });
    const [e] = await runner.leaseSome();
    if (!e) throw new Error("nothing leased");
    await runner.fail(e, "exit code 2");
    expect((await alice.client.loadFlow(ctx, bad.id)).status).toBe("error");

    const messages = await waitForInbox(alice.client, 2);
    expect(messages.map((m) => m.flow_result?.flow_id)).toEqual([ok.id, bad.id]);
    expect(messages[0]).toMatchObject({
      message_type: "mail",
      to: alice.actor.id,
      subject: `flow ${ok.id} finished`,
      flow_result: { status: "finished", result: { a: { answer: "42" } } },
    });
    expect(messages[1]?.flow_result).toMatchObject({ status: "error", error: { name: "b", reason: "exit code 2" } });
    expect(messages[1]?.message).toContain("failed job: b: exit code 2");
    expect(await inboxOf(bob.client)).toEqual([]);

    const popped = await inboxOf(alice.client, true);
    expect(popped.map((m) => m.status)).toEqual(["processed", "processed"]);
    expect(await inboxOf(alice.client)).toEqual([]);
  });
});

describe("messages between actors", () => {
  it("delivers chat and mail to the recipient's inbox only, in every format", async () => {
    for (const format of ["text", "md", "html"] as const) {
      const sent = (await bob.client.request("POST", `/v1/contexts/${ctx}/messages`, {
        to: alice.actor.id,
        message_format_type: format,
        message: `hi in ${format}`,
      })) as Message;
      expect(sent).toMatchObject({
        status: "dispatched",
        caller_id: bob.actor.id,
        to: alice.actor.id,
        message_type: "chat",
      });
    }
    await alice.client.request("POST", `/v1/contexts/${ctx}/messages`, {
      to: bob.actor.id,
      message_type: "mail",
      subject: "re",
      message: "**hello**",
      message_format_type: "md",
    });
    const forAlice = await waitForInbox(alice.client, 3);
    expect(forAlice.map((m) => [m.message_format_type, m.message])).toEqual([
      ["text", "hi in text"],
      ["md", "hi in md"],
      ["html", "hi in html"],
    ]);
    const forBob = await waitForInbox(bob.client, 1);
    expect(forBob).toHaveLength(1);
    expect(forBob[0]).toMatchObject({ message_type: "mail", subject: "re", status: "acknowledged" });
    const popped = await inboxOf(bob.client, true);
    expect(popped[0]).toMatchObject({ subject: "re", status: "processed" });
    // Read, it is removed (the inbox's retention rule): its sender finds it no more.
    const gone = await failure(
      alice.client.request("GET", `/v1/contexts/${ctx}/messages/${alice.actor.id}/${popped[0]?.id}`),
    );
    expect(gone.status).toBe(404);
  });

  it("refuses a recipient outside the context and a sender outside it", async () => {
    const refused = await failure(
      bob.client.request("POST", `/v1/contexts/${ctx}/messages`, { to: carol.actor.id, message: "psst" }),
    );
    expect(refused).toMatchObject({ status: 400, problem: { field: "body.to" } });
    const outsider = await failure(
      carol.client.request("POST", `/v1/contexts/${ctx}/messages`, { to: alice.actor.id, message: "let me in" }),
    );
    expect(outsider).toMatchObject({ status: 403 });
  });

  it("message.create over JSON-RPC", async () => {
    await inboxOf(alice.client, true);
    const sent = await bob.client.rpc<Message>("message.create", {
      context_id: ctx,
      to: alice.actor.id,
      message: "via rpc",
    });
    expect(sent.message).toBe("via rpc");
    expect((await waitForInbox(alice.client, 1))[0]?.message).toBe("via rpc");
  });
});

describe("messages a relay took and never settled", () => {
  it("go to their inbox once their settle time passed, with the dispatcher's alarm coming back for them", async () => {
    const own = (await alice.client.createContext({ readers: [bob.actor.id] })).id;
    // Held in msg_out while dispatch is paused; then taken "by a relay that died" (into the
    // in-flight set, settle due in 1.5 s), and dispatch resumed behind the dispatcher's back.
    await alice.client.setPaused(own, true);
    await alice.client.request("POST", `/v1/contexts/${own}/messages`, {
      to: bob.actor.id,
      message_type: "chat",
      message: "are you there?",
    });
    const [key] = await w.redis.exec<string[]>(["LPOP", w.keys.msgOut(own), "1"]);
    expect(key).toBeDefined();
    const settleBy = Date.now() + 1_500;
    await w.redis.exec(["ZADD", w.keys.inflight(own), String(settleBy), key as string]);
    await w.redis.exec(["HSET", w.keys.context(own), "paused", "false"]);

    const scope = { prefix: w.prefix, contextId: own, origin: "http://coordinator.test" };
    const stub = w.dispatcherStub(own);
    await stub.wake(scope, {}); // binds its scope
    // Its alarm rings (a safety net): nothing is due yet, so it comes back when the message is.
    await runInDurableObject(stub, (instance) => instance.alarm());
    const alarm = await runInDurableObject(stub, (_i, state) => state.storage.getAlarm());
    expect(alarm).toBeGreaterThanOrEqual(settleBy + 1_000);
    expect(alarm).toBeLessThan(settleBy + 3_000);
    await waitUntilPast(alarm as number);
    await runInDurableObject(stub, (instance) => instance.alarm());
    const inbox = (await bob.client.request("GET", `/v1/contexts/${own}/inbox`)) as { messages: Message[] };
    expect(inbox.messages.map((m) => m.message)).toEqual(["are you there?"]);
    expect(await w.redis.exec<number>(["ZCARD", w.keys.inflight(own)])).toBe(0);
  });
});
