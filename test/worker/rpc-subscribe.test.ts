import { runInDurableObject } from "cloudflare:test";
import { afterAll, beforeAll, beforeEach, describe, expect, it } from "vitest";
import { actorKeyId, type PrivateJwk } from "../../shared/auth/index.js";
import type { CoordinatorClient } from "../../shared/client/index.js";
import type { FlowStreamEvent } from "../../shared/model/index.js";
import { eventually } from "../support/eventually.js";
import { signed, testWorker } from "./harness.js";
import { jobName, PullRunner } from "./pull-runner.js";
import { RpcSocket } from "./rpc-session.js";

// flow.subscribe / flow.unsubscribe over a JSON-RPC session: a running flow's events as
// notifications, driven step by step by a pull runner.

const w = testWorker("rpc-subscribe");
afterAll(() => w.cleanup());

let admin: { id: number; jwk: PrivateJwk; client: CoordinatorClient };
let ctx: number;
let runner: PullRunner;

beforeAll(async () => {
  const a = await w.newActor();
  admin = { id: a.actor.id, jwk: a.jwk, client: a.client };
});
beforeEach(async () => {
  ctx = (await admin.client.createContext()).id;
  runner = await PullRunner.register(w, admin.client, ctx);
});

const open = async (who: { id: number; jwk: PrivateJwk } = admin) =>
  RpcSocket.open(
    w,
    await signed("GET", "/rpc", who.jwk, actorKeyId(who.id), undefined, { headers: { upgrade: "websocket" } }),
  );

/** A flow a → b, not started. */
const diamond = () =>
  admin.client.submitFlow(ctx, {
    jobs: [
      { name: "a", script: "echo a", script_type: "sh" },
      { name: "b", script: "echo b", script_type: "sh", depends: ["a"] },
    ],
  });

/** Leases the next job, which must be `name`, and finishes it. */
async function runNext(name: string): Promise<void> {
  const [delivery] = await runner.leaseSome(1);
  if (!delivery) throw new Error(`${name} was not leased`);
  expect(jobName(delivery)).toBe(name);
  await runner.finish(delivery, { [name]: "done" });
}

const subscribe = async (socket: RpcSocket, flowId: number, since?: number) => {
  const answer = await socket.call("flow.subscribe", { context_id: ctx, id: flowId, ...(since ? { since } : {}) });
  expect(answer.error).toBeUndefined();
  return { id: (answer.result as { subscription: string }).subscription, at: socket.indexOf(answer) };
};

const finished = (e: FlowStreamEvent) => e.type === "flow.finished";
const seqs = (events: { event: FlowStreamEvent }[]) => events.map((e) => e.event.seq);
const numbered = (n: number, from = 1) => Array.from({ length: n }, (_, i) => i + from);

describe("flow.subscribe", () => {
  it("pushes a running flow's events in order, each once, after the answer naming the subscription", async () => {
    const flow = await diamond();
    const socket = await open();
    const sub = await subscribe(socket, flow.id);
    await socket.result("flow.start", { context_id: ctx, id: flow.id });
    await runNext("a");
    await runNext("b");
    const events = await socket.untilEvent(sub.id, finished, "flow.finished");
    expect(seqs(events)).toEqual(numbered(events.length));
    expect(events[0]?.at).toBeGreaterThan(sub.at);
    expect(events.every(({ event }) => event.flow_id === flow.id && event.context_id === ctx)).toBe(true);
    const [a, b] = flow.jobs.map((j) => j.id);
    const types = events.map(
      ({ event }) => `${event.type}${event.job_id === a ? ":a" : event.job_id === b ? ":b" : ""}`,
    );
    // What a watcher needs to follow it: a starts and ends before b is dispatched; the flow ends last.
    expect(types.indexOf("flow.started")).toBeLessThan(types.indexOf("job.dispatched:a"));
    expect(types.indexOf("job.started:a")).toBeLessThan(types.indexOf("job.finished:a"));
    expect(types.indexOf("job.finished:a")).toBeLessThan(types.indexOf("job.dispatched:b"));
    expect(types.indexOf("job.finished:b")).toBeLessThan(types.indexOf("flow.finished"));
    expect(events.at(-1)?.event).toMatchObject({ type: "flow.finished", status: "finished" });
    // A subscriber that comes afterwards is replayed the same events from the flow's journal, after
    // the answer naming it: in a batch, the answer waits for the batch's other calls, and so do they.
    socket.send(
      JSON.stringify([
        { jsonrpc: "2.0", id: "late", method: "flow.subscribe", params: { context_id: ctx, id: flow.id } },
        { jsonrpc: "2.0", id: "view", method: "flow.load", params: { context_id: ctx, id: flow.id } },
      ]),
    );
    const batch = await socket.frame(Array.isArray, "the batch's answer");
    const late = (batch as { result?: { subscription?: string } }[])[0]?.result?.subscription ?? "";
    const replayed = await socket.untilEvent(late, finished, "the replay");
    expect(replayed.map((e) => e.event)).toEqual(events.map((e) => e.event));
    expect(replayed[0]?.at).toBeGreaterThan(socket.indexOf(batch));
    socket.close();
  });

  it("resumes after `since`: a view's last_seq, then only what follows it", async () => {
    const flow = await diamond();
    await admin.client.startFlow(ctx, flow.id);
    await runNext("a");
    const view = await admin.client.loadFlow(ctx, flow.id);
    expect(view.last_seq).toBeGreaterThan(0);
    const socket = await open();
    const sub = await subscribe(socket, flow.id, view.last_seq);
    await runNext("b");
    const events = await socket.untilEvent(sub.id, finished, "flow.finished");
    expect(seqs(events)).toEqual(numbered(events.length, (view.last_seq ?? 0) + 1));
    socket.close();
  });

  it("stops a subscription's events at flow.unsubscribe, and leaves the others running", async () => {
    const flow = await diamond();
    const socket = await open();
    const leaving = await subscribe(socket, flow.id);
    const staying = await subscribe(socket, flow.id);
    await socket.result("flow.start", { context_id: ctx, id: flow.id });
    await runNext("a");
    await socket.untilEvent(leaving.id, (e) => e.type === "job.finished", "a's end");
    const bye = await socket.call("flow.unsubscribe", { subscription: leaving.id });
    expect(bye.result).toBe(true);
    await runNext("b");
    const all = await socket.untilEvent(staying.id, finished, "flow.finished");
    const left = socket.events(leaving.id);
    // Nothing of the ended subscription after the answer, and what it got is the start of the whole.
    expect(left.every((e) => e.at < socket.indexOf(bye))).toBe(true);
    expect(left.map((e) => e.event)).toEqual(all.slice(0, left.length).map((e) => e.event));
    expect(all.length).toBeGreaterThan(left.length);
    expect((await socket.call("flow.unsubscribe", { subscription: leaving.id })).error?.code).toBe(-32004);
    socket.close();
  });

  it("refuses a missing flow (-32004) and a caller who may not read it (-32003)", async () => {
    const flow = await diamond();
    const socket = await open();
    expect((await socket.call("flow.subscribe", { context_id: ctx, id: 999_999 })).error?.code).toBe(-32004);
    const outsider = await w.newActor();
    const theirs = await open({ id: outsider.actor.id, jwk: outsider.jwk });
    const refused = await theirs.call("flow.subscribe", { context_id: ctx, id: flow.id });
    expect(refused.error).toMatchObject({ code: -32003, data: { type: "/problems/forbidden" } });
    socket.close();
    theirs.close();
  });

  it("opens a dropped stream again from the last event forwarded: nothing lost, nothing twice", async () => {
    const flow = await diamond();
    const socket = await open();
    const sub = await subscribe(socket, flow.id);
    await socket.result("flow.start", { context_id: ctx, id: flow.id });
    await runNext("a");
    const before = await socket.untilEvent(sub.id, (e) => e.type === "job.finished", "a's end");
    // The flow's object drops its subscribers (as when it is reset): the session subscribes anew.
    const { stub } = w.flowStub(ctx, flow.id);
    await runInDurableObject(stub, (_instance, state) => {
      for (const s of state.getWebSockets()) s.close(1012, "restarting");
    });
    await eventually(
      () => runInDurableObject(stub, (_i, state) => (state.getWebSockets().length === 1 ? true : undefined)),
      10_000,
      20,
      "the session's new stream",
    );
    await runNext("b");
    const events = await socket.untilEvent(sub.id, finished, "flow.finished");
    expect(events.length).toBeGreaterThan(before.length);
    expect(seqs(events)).toEqual(numbered(events.length));
    socket.close();
  });

  it("closes the session's streams when the session closes", async () => {
    const flow = await diamond();
    const socket = await open();
    await subscribe(socket, flow.id);
    await subscribe(socket, flow.id);
    const { stub } = w.flowStub(ctx, flow.id);
    expect(await runInDurableObject(stub, (_i, state) => state.getWebSockets().length)).toBe(2);
    socket.close();
    await eventually(
      () => runInDurableObject(stub, (_i, state) => (state.getWebSockets().length === 0 ? true : undefined)),
      10_000,
      20,
      "the object's subscribers gone",
    );
  });
});
