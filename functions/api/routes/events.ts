import { createRoute, z, type OpenAPIHono } from "@hono/zod-openapi";
import { EventInput, EventSent } from "../../../shared/model/index.js";
import { sendEvent } from "../../service/events.js";
import { flowCall } from "../call.js";
import { body, conflict, json, PathId, signed, signedErrors } from "../schemas.js";
import type { AppEnv } from "../app-env.js";

const send = createRoute({
  method: "post",
  path: "/v1/contexts/{contextId}/events",
  tags: ["events"],
  summary:
    "Send an event to the context's waits (executors, or a runner of the context): every wait for its name and key finishes with its data",
  security: signed,
  request: { params: z.object({ contextId: PathId }), ...body(EventInput) },
  responses: {
    200: json(EventSent, "How many waits it matched and resumed; `duplicate` when its id was sent before"),
    ...signedErrors,
    ...conflict,
  },
});

/** Events for waits (docs/flows.md, "Events"). */
export function registerEventRoutes(app: OpenAPIHono<AppEnv>): void {
  app.openapi(send, async (c) =>
    c.json(await sendEvent(flowCall(c), c.req.valid("param").contextId, c.req.valid("json")), 200),
  );
}
