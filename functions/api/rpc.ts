import type { OpenAPIHono } from "@hono/zod-openapi";
import { publicOrigin } from "../core/config.js";
import { toProblem } from "../core/errors.js";
import { Problem } from "../core/problem.js";
import type { AppEnv } from "./app-env.js";
import { authenticate } from "./auth.js";
import { flowCall } from "./call.js";
import { openRpcDocument } from "./openrpc.js";
import { answerMessage, fromProblem, type Transport } from "./rpc-dispatch.js";
import { rpcMethods } from "./rpc-methods.js";
import { openSession } from "./rpc-socket.js";
import { SOCKET_METHODS } from "./rpc-subscriptions.js";
import { signed, signedErrors } from "./schemas.js";

/** POST /rpc runs every method but those that push notifications, which need a session. */
const HTTP: Transport = {
  methods: rpcMethods,
  notHere: (name) =>
    Object.hasOwn(SOCKET_METHODS, name)
      ? `${name} needs a WebSocket session: GET /rpc with Upgrade: websocket`
      : undefined,
};

/**
 * `POST /rpc`: JSON-RPC 2.0 (single calls and batches) behind the same signature check as the
 * REST routes; a refused signature answers with the problem's HTTP status and a JSON-RPC error.
 * `GET /rpc` with `Upgrade: websocket`: the same methods and subscriptions in a session (see
 * rpc-socket.ts). `GET /openrpc.json`: the methods documented from their schemas.
 */
export function registerRpc(app: OpenAPIHono<AppEnv>): void {
  app.post("/rpc", async (c) => {
    try {
      await authenticate(c, async () => {});
    } catch (error) {
      const problem = toProblem(error);
      return c.json(fromProblem(null, problem), problem.status, problem.headers);
    }
    const call = flowCall(c);
    const answer = await answerMessage(call, HTTP, new TextDecoder().decode(call.body));
    return answer ? c.json(answer, 200) : c.body(null, 204);
  });
  app.get("/rpc", async (c) => {
    if (c.req.header("upgrade")?.toLowerCase() !== "websocket") {
      throw new Problem(
        "bad-request",
        "GET /rpc opens a JSON-RPC session over WebSocket: send Upgrade: websocket (or POST /rpc a call)",
        { field: "header.upgrade" },
      );
    }
    // A refused signature or ticket is thrown as its 401 problem, before any upgrade.
    await authenticate(c, async () => {});
    return openSession(c);
  });
  app.get("/openrpc.json", (c) => c.json(openRpcDocument(publicOrigin(c.env) || new URL(c.req.url).origin)));

  // The methods' names are read when the document is generated (a getter), so that building the
  // method table is no part of an isolate's start.
  const methods = () =>
    `Methods: ${Object.keys(rpcMethods()).join(", ")}; each one's params, result and errors are in /openrpc.json.`;
  const codes =
    "Errors carry the problem document in error.data; codes -32602 invalid params, -32001 unauthorized, -32003 forbidden, -32004 not found, -32009 conflict, -32022 Idempotency-Key reused, -32053 storage unavailable.";
  app.openAPIRegistry.registerPath({
    method: "post",
    path: "/rpc",
    tags: ["json-rpc"],
    summary: "JSON-RPC 2.0",
    get description() {
      return `${methods()} Signed like every /v1 route. ${codes}`;
    },
    security: signed,
    responses: { 200: { description: "A JSON-RPC response (or an array of them for a batch)" } },
  });
  app.openAPIRegistry.registerPath({
    method: "get",
    path: "/rpc",
    tags: ["json-rpc"],
    summary: "JSON-RPC 2.0 over WebSocket",
    description: `Upgrade: websocket. A session: each text frame a call or a batch, as over POST /rpc, plus flow.subscribe / flow.unsubscribe whose events come as flow.event notifications. The handshake is signed (RFC 9421), or carries ?ticket= from POST /v1/tickets (browsers). ${codes}`,
    security: signed,
    responses: {
      101: { description: "Switching Protocols: the session is open" },
      400: signedErrors[400],
      401: signedErrors[401],
      503: signedErrors[503],
    },
  });
  app.openAPIRegistry.registerPath({
    method: "get",
    path: "/openrpc.json",
    tags: ["json-rpc"],
    summary: "The OpenRPC document of /rpc",
    description:
      "Every method with its params and result (JSON Schema from the zod schemas calls are validated with), the errors, and the notifications a WebSocket session sends.",
    responses: { 200: { description: "An OpenRPC 1.3 document" } },
  });
}
