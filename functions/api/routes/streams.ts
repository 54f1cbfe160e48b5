import { createRoute, z, type OpenAPIHono } from "@hono/zod-openapi";
import { ContextStreamEvent, FlowStreamEvent, StreamTicket } from "../../../shared/model/index.js";
import { contextStreamSocket, flowStreamSocket, issueTicket } from "../../service/streams.js";
import { flowCall, serviceCall } from "../call.js";
import { eventStream } from "../sse.js";
import { json, PathId, signed, signedErrors } from "../schemas.js";
import type { AppEnv } from "../app-env.js";

/** A sequence number: at most 15 digits, as the objects read it. */
const Since = z.coerce.number().int().min(0).max(999_999_999_999_999);

/** What a stream request may say: where to resume, and (for a browser's WebSocket) a ticket. */
const streamRequest = {
  query: z.object({
    since: Since.optional().openapi({ description: "Resume after this event (its `seq`)" }),
    ticket: z
      .string()
      .optional()
      .openapi({ description: "Instead of a signature, on a WebSocket upgrade: a ticket from POST /v1/tickets" }),
  }),
  headers: z.object({
    "last-event-id": z
      .string()
      .regex(/^\d{1,15}$/, "the seq of the last event seen")
      .optional(),
  }),
};

/** The two ways to read a stream, as the OpenAPI document tells them. */
function streamResponses(event: z.ZodType, what: string) {
  return {
    200: {
      description: `Server-Sent Events: each event is \`id: <seq>\`, \`event: <type>\`, \`data: <${what} JSON>\`; a comment every 15 s keeps it open`,
      content: { "text/event-stream": { schema: event } },
    },
    101: { description: `With \`Upgrade: websocket\`: a WebSocket whose text frames are ${what} JSON, one per frame` },
    ...signedErrors,
  };
}

const flowEvents = createRoute({
  method: "get",
  path: "/v1/contexts/{contextId}/flows/{flowId}/events",
  tags: ["streams"],
  summary: "A flow's event stream, live (readers)",
  description:
    "Every change of the flow, numbered from 1 (`seq`), from `since` (or `Last-Event-ID`) onwards, then live: nothing lost and nothing twice across reconnects. Without either, from the flow's first event. The stream stays open after the flow ends (a re-run may start it again).",
  security: signed,
  request: { params: z.object({ contextId: PathId, flowId: PathId }), ...streamRequest },
  responses: streamResponses(FlowStreamEvent, "FlowStreamEvent"),
});

const contextEvents = createRoute({
  method: "get",
  path: "/v1/contexts/{contextId}/events",
  tags: ["streams"],
  summary: "A context's event stream: every flow's own events, live (readers)",
  description:
    "The `flow.*` events of every flow of the context, in the context's own sequence. Without `since` (or `Last-Event-ID`), from now on. The context keeps its last 10,000 events: resuming from before them starts with a `stream.reset` event (reload the list).",
  security: signed,
  request: { params: z.object({ contextId: PathId }), ...streamRequest },
  responses: streamResponses(ContextStreamEvent, "ContextStreamEvent"),
});

const ticket = createRoute({
  method: "post",
  path: "/v1/tickets",
  tags: ["streams"],
  summary: "A single-use ticket for a WebSocket handshake (actors and runners)",
  description:
    "Browsers cannot sign a WebSocket handshake: a signed request gets a ticket, and one upgrade (`?ticket=`) on an event stream or `GET /rpc` uses it up, as the signer. Valid 60 s.",
  security: signed,
  responses: { 201: json(StreamTicket, "The ticket"), ...signedErrors },
});

/** Where to resume: `since`, else `Last-Event-ID`, else undefined (each stream's default). */
function resumeFrom(query: { since?: number | undefined }, headers: { "last-event-id"?: string | undefined }) {
  const header = headers["last-event-id"];
  return query.since ?? (header !== undefined ? Number(header) : undefined);
}

function wantsSocket(request: Request): boolean {
  return request.headers.get("upgrade")?.toLowerCase() === "websocket";
}

/** Stream routes: a flow's and a context's events (SSE or WebSocket), and WebSocket tickets. */
export function registerStreamRoutes(app: OpenAPIHono<AppEnv>): void {
  app.openapi(flowEvents, async (c) => {
    const { contextId, flowId } = c.req.valid("param");
    const since = resumeFrom(c.req.valid("query"), c.req.valid("header"));
    const answer = await flowStreamSocket(flowCall(c), contextId, flowId, since);
    // A WebSocket client gets the object's own socket: it may hibernate with the client attached.
    return (wantsSocket(c.req.raw) ? answer : eventStream(answer.webSocket as WebSocket)) as never;
  });
  app.openapi(contextEvents, async (c) => {
    const { contextId } = c.req.valid("param");
    const since = resumeFrom(c.req.valid("query"), c.req.valid("header"));
    const socket = wantsSocket(c.req.raw);
    const answer = await contextStreamSocket(flowCall(c), contextId, since, !socket);
    return (socket ? answer : eventStream(answer.webSocket as WebSocket)) as never;
  });
  app.openapi(ticket, async (c) => c.json(await issueTicket(serviceCall(c)), 201));
}
