import { describe, expect, it } from "vitest";
import { actorKeyId, signRequest } from "../../shared/auth/index.js";
import { signerFromJwk } from "../../shared/client/index.js";
import { FlowStreamEvent, type StreamTicket } from "../../shared/model/index.js";
import { eventually } from "../support/eventually.js";
import { refusedUpgrade } from "../support/streams.js";
import { usePrivateStack } from "../support/use-private-stack.js";

// JSON-RPC over a real WebSocket on a stack of this file's own (wrangler dev, redis-server, a
// runner process): a non-browser client signing its handshake, a browser-like one with a ticket,
// and a subscription following a flow that real runners run.

const { stack, admin } = usePrivateStack("rpc-socket");

interface Frame {
  id?: number;
  result?: unknown;
  error?: { code: number };
  method?: string;
  params?: { subscription: string; event: unknown };
}

/** A JSON-RPC session on a Node WebSocket: call by id, and every frame kept in order. */
async function session(url: string, headers?: Record<string, string>) {
  // Node's WebSocket (undici's) takes headers in its options, as non-browser clients can.
  const socket = new WebSocket(url, headers ? ({ headers } as unknown as string[]) : undefined);
  const frames: Frame[] = [];
  socket.addEventListener("message", (m) => {
    frames.push(JSON.parse(String(m.data)) as Frame);
  });
  await new Promise<void>((resolve, reject) => {
    socket.addEventListener("open", () => resolve());
    socket.addEventListener("error", () => reject(new Error(`the session ${url} did not open`)));
  });
  let next = 1;
  const call = async (method: string, params: unknown): Promise<Frame> => {
    const id = next++;
    socket.send(JSON.stringify({ jsonrpc: "2.0", id, method, params }));
    return eventually(() => frames.find((f) => f.id === id), 30_000, 20, `the answer to ${method}`);
  };
  return { socket, frames, call };
}

const rpcUrl = (query = "") => `${stack().url.replace(/^http/, "ws")}/rpc${query}`;

describe("JSON-RPC over WebSocket, on the wire", () => {
  it("opens a session with a signed handshake (non-browser clients) and runs calls as the signer", async () => {
    const signer = await signerFromJwk(admin().jwk, actorKeyId(admin().id));
    // The signature covers the request the Worker sees: GET http(s)://…/rpc.
    const handshake = await signRequest(new Request(`${stack().url}/rpc`), signer);
    const headers = Object.fromEntries(
      ["signature", "signature-input"].map((name) => [name, handshake.headers.get(name) ?? ""]),
    );
    const { socket, call } = await session(rpcUrl(), headers);
    expect((await call("actor.load", { id: admin().id })).result).toMatchObject({ id: admin().id });
    expect((await call("context.load", { id: 999_999 })).error?.code).toBe(-32004);
    socket.close();
    // Without a signature (or a ticket) the handshake is refused before any upgrade.
    const unsigned = await refusedUpgrade(`${stack().url}/rpc`);
    expect([unsigned.status, unsigned.problem.type]).toEqual([401, "/problems/signature-missing"]);
  });

  it("follows a flow run by a real runner, in a session opened with a ticket (browsers)", async () => {
    const ctx = await admin().client.createContext();
    await (await stack().registerTestRunner(admin().client, ctx.id, { WORK_MS: "100" })).start();
    const { ticket } = (await admin().client.request("POST", "/v1/tickets", {})) as StreamTicket;
    const { socket, frames, call } = await session(rpcUrl(`?ticket=${ticket}`));
    const flow = await admin().client.submitFlow(ctx.id, {
      jobs: [
        { name: "a", script: "true", script_type: "sh" },
        { name: "b", script: "true", script_type: "sh", depends: ["a"] },
        { name: "c", script: "true", script_type: "sh", depends: ["a"] },
      ],
    });
    const answer = await call("flow.subscribe", { context_id: ctx.id, id: flow.id });
    const { subscription } = answer.result as { subscription: string };
    expect((await call("flow.start", { context_id: ctx.id, id: flow.id })).error).toBeUndefined();
    const events = await eventually(
      () => {
        const mine = frames.filter((f) => f.method === "flow.event" && f.params?.subscription === subscription);
        return mine.some((f) => (f.params?.event as { type: string }).type === "flow.finished") ? mine : undefined;
      },
      60_000,
      50,
      "flow.finished",
    );
    const parsed = events.map((f) => FlowStreamEvent.parse(f.params?.event));
    expect(parsed.map((e) => e.seq)).toEqual(parsed.map((_, i) => i + 1));
    expect(frames.indexOf(events[0] as Frame)).toBeGreaterThan(frames.indexOf(answer));
    expect(parsed.at(-1)).toMatchObject({ type: "flow.finished", status: "finished", flow_id: flow.id });
    socket.close();
    // The ticket opened one session: it opens nothing more.
    const again = await refusedUpgrade(`${stack().url}/rpc?ticket=${ticket}`);
    expect([again.status, again.problem.type]).toEqual([401, "/problems/ticket-invalid"]);
  });
});
