import { actorKeyId, runnerKeyId } from "../../shared/auth/index.js";
import type { StreamTicket } from "../../shared/model/index.js";
import { Problem } from "../core/problem.js";
import { PROBLEMS, type ProblemType } from "../core/problems.js";
import { dispatchScopeOf } from "../core/scopes.js";
import { coordinatorStub, feedStub } from "../core/stubs.js";
import { contextFor, requireActor } from "./access.js";
import { callScope, scopeBase, type FlowCall, type ServiceCall } from "./call.js";

/** The internal URL the Worker asks a Durable Object for a subscriber's WebSocket at. */
function streamUrl(since: number | undefined, extra: Record<string, string> = {}): string {
  const query = new URLSearchParams({ ...(since !== undefined ? { since: String(since) } : {}), ...extra });
  return `https://stream.internal/events?${query}`;
}

/** Why the object would not open the stream: its problem document, thrown again as a Problem. */
async function refused(response: Response): Promise<never> {
  const text = await response.text();
  let body: { type?: string; detail?: string } = {};
  try {
    body = JSON.parse(text) as typeof body;
  } catch {
    // Not a problem document: said below as it is.
  }
  const kind = body.type?.split("/").pop() ?? "";
  if (Object.hasOwn(PROBLEMS, kind)) throw new Problem(kind as ProblemType, body.detail);
  throw new Error(`the stream could not be opened (${response.status}): ${text.slice(0, 200)}`);
}

/**
 * A subscriber's WebSocket on a flow's event stream (readers and up), as the flow's object
 * answers it: a 101 whose `webSocket` is the subscriber's end. The Worker hands it to a client
 * that asked for a WebSocket (so the socket lives on the object, which may hibernate), or reads
 * it itself to serve Server-Sent Events.
 */
export async function flowStreamSocket(
  call: FlowCall,
  contextId: number,
  flowId: number,
  since: number | undefined,
): Promise<Response> {
  await contextFor(call, contextId, "read");
  const scope = callScope(call, contextId, { flowId });
  const response = await coordinatorStub(call.env, scope).fetch(streamUrl(since ?? 0), {
    headers: { upgrade: "websocket", "x-flow-scope": JSON.stringify(scope) },
  });
  if (response.status !== 101 || !response.webSocket) return refused(response);
  return response;
}

/**
 * The same for a context's stream: every flow's `flow.*` events. Without `since`, from now on;
 * `relayed` (for the Worker's SSE relay) starts with a `{cursor}` frame saying where now is.
 */
export async function contextStreamSocket(
  call: FlowCall,
  contextId: number,
  since: number | undefined,
  relayed = false,
): Promise<Response> {
  await contextFor(call, contextId, "read");
  const scope = dispatchScopeOf({ ...scopeBase(call), contextId });
  const query = { context: String(contextId), ...(relayed ? { cursor: "1" } : {}) };
  const response = await feedStub(call.env, scope).fetch(streamUrl(since, query), {
    headers: { upgrade: "websocket" },
  });
  if (response.status !== 101 || !response.webSocket) return refused(response);
  return response;
}

/**
 * A flow's event stream as an accepted WebSocket inside this Worker: each text frame is one
 * FlowStreamEvent (JSON), from `since` onwards. For JSON-RPC's `flow.subscribe`.
 */
export async function openFlowStream(
  call: FlowCall,
  contextId: number,
  flowId: number,
  since: number,
): Promise<WebSocket> {
  const socket = (await flowStreamSocket(call, contextId, flowId, since)).webSocket as WebSocket;
  socket.accept();
  return socket;
}

/** A single-use ticket that opens one WebSocket as the signer (an actor or a runner; a bare key gets none). */
export async function issueTicket(call: ServiceCall): Promise<StreamTicket> {
  const p = call.principal;
  const keyid = p.kind === "runner" ? runnerKeyId(p.contextId, p.id) : actorKeyId(requireActor(call));
  const { ticket, expiresAt } = await call.store.tickets.issue(keyid);
  return { ticket, expires_at: expiresAt };
}
