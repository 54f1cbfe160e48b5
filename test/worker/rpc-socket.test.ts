import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { MAX_FRAMES_WAITING } from "../../functions/api/rpc-socket.js";
import { actorKeyId, generateKeyPair, type PrivateJwk } from "../../shared/auth/index.js";
import type { CoordinatorClient } from "../../shared/client/index.js";
import type { StreamTicket } from "../../shared/model/index.js";
import { eventually } from "../support/eventually.js";
import { BASE, signed, testWorker } from "./harness.js";
import { RpcSocket, type Frame } from "./rpc-session.js";

// JSON-RPC 2.0 over WebSocket (GET /rpc): the session's protocol, and who may open one.

const w = testWorker("rpc-socket");
afterAll(() => w.cleanup());

interface Signer {
  id: number;
  jwk: PrivateJwk;
  client: CoordinatorClient;
}
let admin: Signer;
let reader: Signer;
let contextId: number;

beforeAll(async () => {
  const a = await w.newActor();
  admin = { id: a.actor.id, jwk: a.jwk, client: a.client };
  const r = await w.newActor();
  reader = { id: r.actor.id, jwk: r.jwk, client: r.client };
  contextId = (await admin.client.createContext({ readers: [reader.id] })).id;
});

/** A signed upgrade request to GET /rpc. */
const upgrade = (who: Signer) =>
  signed("GET", "/rpc", who.jwk, actorKeyId(who.id), undefined, { headers: { upgrade: "websocket" } });

const openAs = async (who: Signer) => RpcSocket.open(w, await upgrade(who));

describe("a session's calls", () => {
  it("runs calls as the signer of the handshake, several on one socket", async () => {
    const socket = await openAs(admin);
    expect(await socket.result("actor.load", { id: admin.id })).toMatchObject({ id: admin.id });
    const context = await socket.result<{ id: number; admins: number[] }>("context.create", {});
    expect(context.admins).toEqual([admin.id]);
    expect(await socket.result("context.load", { id: context.id })).toMatchObject(context);
    socket.close();
  });

  it("answers a batch in one frame, in order, leaving out its notifications", async () => {
    const socket = await openAs(admin);
    socket.send(
      JSON.stringify([
        { jsonrpc: "2.0", id: "a", method: "actor.load", params: { id: admin.id } },
        { jsonrpc: "2.0", method: "actor.load", params: { id: admin.id } },
        { jsonrpc: "2.0", id: "b", method: "context.load", params: { id: 999_999 } },
      ]),
    );
    const batch = (await socket.frame(Array.isArray, "the batch's answer")) as Frame[];
    expect(batch.map((a) => a.id)).toEqual(["a", "b"]);
    expect(batch[0]?.result).toMatchObject({ id: admin.id });
    expect(batch[1]?.error).toMatchObject({ code: -32004, data: { type: "/problems/not-found" } });
    socket.close();
  });

  it("answers notifications with nothing, and protocol errors with the spec's codes", async () => {
    const socket = await openAs(admin);
    const quiet = 4_000_000_000 + Math.floor(Math.random() * 1_000_000);
    socket.send(JSON.stringify({ jsonrpc: "2.0", method: "context.create", params: { id: quiet } }));
    // The notification ran: its context exists.
    await eventually(() => admin.client.loadContext(quiet).catch(() => undefined), 10_000, 20, "the context");
    socket.send("{nope");
    const parse = await socket.frame((f) => !Array.isArray(f) && f.error?.code === -32700, "the parse error");
    expect(parse).toMatchObject({ id: null });
    socket.send(JSON.stringify({ id: 5, method: "actor.load" }));
    await socket.frame((f) => !Array.isArray(f) && f.error?.code === -32600, "the invalid request");
    socket.send("[]");
    await socket.frame((f) => !Array.isArray(f) && f.error?.code === -32600 && f.error.message.includes("empty"), "[]");
    expect(await socket.call("flow.fly", {})).toMatchObject({ error: { code: -32601 } });
    const invalid = await socket.call("flow.load", { context_id: contextId, id: "seven" });
    expect(invalid.error).toMatchObject({ code: -32602, data: { field: "params.id" } });
    // Everything sent was answered but the notification, which ran and said nothing.
    expect(socket.frames).toHaveLength(5);
    socket.close();
  });

  it("checks each method's permission as POST /rpc does: a reader may read, not pause", async () => {
    const socket = await openAs(reader);
    expect(await socket.result("context.load", { id: contextId })).toMatchObject({ id: contextId });
    const refused = await socket.call("context.pause", { id: contextId });
    expect(refused.error).toMatchObject({ code: -32003, data: { type: "/problems/forbidden", needed: ["admins"] } });
    expect((await admin.client.loadContext(contextId)).paused ?? false).toBe(false);
    socket.close();
  });

  it("closes a session that sends far more than it waits for (1008), rather than buffering it all", async () => {
    const socket = await openAs(admin);
    const call = JSON.stringify({ jsonrpc: "2.0", id: 1, method: "actor.load", params: { id: admin.id } });
    for (let i = 0; i < 4 * MAX_FRAMES_WAITING; i++) socket.send(call);
    const closed = await eventually(() => socket.closed, 10_000, 20, "the session closed");
    expect(closed.code).toBe(1008);
    expect(socket.frames.length).toBeLessThan(4 * MAX_FRAMES_WAITING);
  });

  it("ends a session (1008) once its signer's key was rotated, within the revocation bound", async () => {
    const a = await w.newActor();
    const signer: Signer = { id: a.actor.id, jwk: a.jwk, client: a.client };
    const socket = await openAs(signer);
    expect(await socket.result("actor.load", { id: signer.id })).toMatchObject({ id: signer.id });
    await signer.client.rotateKey(signer.id, await generateKeyPair());
    // The isolate reads the revocation epoch at most once a second: a frame after that ends it.
    await new Promise((r) => setTimeout(r, 1_100));
    socket.send(JSON.stringify({ jsonrpc: "2.0", id: 99, method: "actor.load", params: { id: signer.id } }));
    const closed = await eventually(() => socket.closed, 10_000, 20, "the session closed");
    expect(closed.code).toBe(1008);
    expect(socket.frames.some((f) => !Array.isArray(f) && f.id === 99)).toBe(false);
  });

  it("offers flow.subscribe on sockets only", async () => {
    const answer = (await admin.client.rpc("flow.subscribe", { context_id: contextId, id: 1 }).catch((e) => e)) as {
      rpcCode: number;
    };
    expect(answer.rpcCode).toBe(-32601);
  });
});

describe("opening a session", () => {
  it("refuses an unsigned handshake with a 401 problem, before any upgrade", async () => {
    const res = await w.fetch(new Request(`${BASE}/rpc`, { headers: { upgrade: "websocket" } }));
    expect(res.status).toBe(401);
    expect(res.headers.get("content-type")).toBe("application/problem+json");
    expect(await res.json()).toMatchObject({ type: "/problems/signature-missing" });
    expect(res.webSocket).toBeNull();
  });

  it("refuses a replayed handshake signature", async () => {
    const request = await upgrade(admin);
    const replay = request.clone();
    (await RpcSocket.open(w, request)).close();
    const res = await w.fetch(replay);
    expect(res.status).toBe(401);
    expect(await res.json()).toMatchObject({ type: "/problems/nonce-replayed" });
  });

  it("refuses GET /rpc without Upgrade: websocket, naming the header", async () => {
    const res = await w.fetch(await signed("GET", "/rpc", admin.jwk, actorKeyId(admin.id)));
    expect(res.status).toBe(400);
    expect(await res.json()).toMatchObject({ type: "/problems/bad-request", field: "header.upgrade" });
  });

  it("opens with a ticket as its signer, once: a ticket used twice is refused", async () => {
    const { ticket } = (await reader.client.request("POST", "/v1/tickets", {})) as StreamTicket;
    const byTicket = () =>
      new Request(`${BASE}/rpc?ticket=${encodeURIComponent(ticket)}`, { headers: { upgrade: "websocket" } });
    const socket = await RpcSocket.open(w, byTicket());
    // The session acts as the reader, with the reader's permissions.
    expect(await socket.result("actor.load", { id: reader.id })).toMatchObject({ id: reader.id });
    expect((await socket.call("flow.cancel", { context_id: contextId, id: 1 })).error?.code).toBe(-32003);
    const again = await w.fetch(byTicket());
    expect(again.status).toBe(401);
    expect(await again.json()).toMatchObject({ type: "/problems/ticket-invalid" });
    socket.close();
  });

  it("refuses an unknown ticket", async () => {
    const res = await w.fetch(
      new Request(`${BASE}/rpc?ticket=${"A".repeat(43)}`, { headers: { upgrade: "websocket" } }),
    );
    expect(res.status).toBe(401);
    expect(await res.json()).toMatchObject({ type: "/problems/ticket-invalid" });
  });
});
