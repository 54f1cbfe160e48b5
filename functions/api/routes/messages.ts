import { createRoute, z, type OpenAPIHono } from "@hono/zod-openapi";
import { MessageSubmission } from "../../../shared/model/index.js";
import { inbox, sendMessage } from "../../service/messages.js";
import { flowCall } from "../call.js";
import { body, json, PathId, schemas, signed, signedErrors } from "../schemas.js";
import type { AppEnv } from "../app-env.js";

const contextParams = z.object({ contextId: PathId });

const send = createRoute({
  method: "post",
  path: "/v1/contexts/{contextId}/messages",
  tags: ["messages"],
  summary: "Send a chat line or a mail to another member of the context (members)",
  description:
    "Stored and put on msg_out in one step, relayed at once into the recipient's inbox and POSTed (signed) to its https addresses.",
  security: signed,
  request: { params: contextParams, ...body(MessageSubmission) },
  responses: { 201: json(schemas.Message, "Sent"), ...signedErrors },
});

const read = createRoute({
  method: "get",
  path: "/v1/contexts/{contextId}/inbox",
  tags: ["messages"],
  summary: "Read one's inbox: results of one's flows, chat and mail (members)",
  description:
    "Oldest first. `pop=true` takes the returned messages off the inbox: they were read, and are removed from storage (answered once more, marked processed). Messages left unread are removed after the context's `inbox_seconds` (its retention).",
  security: signed,
  request: {
    params: contextParams,
    query: z.object({
      max: z.coerce.number().int().min(1).max(100).default(20),
      pop: z.enum(["true", "false"]).default("false"),
    }),
  },
  responses: { 200: json(z.object({ messages: z.array(schemas.Message) }), "Messages"), ...signedErrors },
});

/** Messages between actors and the inbox. */
export function registerMessageRoutes(app: OpenAPIHono<AppEnv>): void {
  app.openapi(send, async (c) => {
    return c.json(await sendMessage(flowCall(c), c.req.valid("param").contextId, c.req.valid("json")), 201);
  });
  app.openapi(read, async (c) => {
    const { max, pop } = c.req.valid("query");
    return c.json({ messages: await inbox(flowCall(c), c.req.valid("param").contextId, max, pop === "true") }, 200);
  });
}
