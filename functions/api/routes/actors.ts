import { createRoute, z, type OpenAPIHono } from "@hono/zod-openapi";
import { WhoAmI } from "../../../shared/model/index.js";
import { loadActor, registerActor, rotateActorKey, updateActor, whoAmI } from "../../service/actors.js";
import { serviceCall } from "../call.js";
import { body, conflict, json, PathId, schemas, signed, signedErrors } from "../schemas.js";
import type { AppEnv } from "../app-env.js";

const actorParams = z.object({ actorId: PathId });

const register = createRoute({
  method: "post",
  path: "/v1/actors",
  tags: ["actors"],
  summary: "Register an actor",
  description:
    "Signed by the key being registered (keyid `key:<pubkey>`): proof of possession. Depending on ACTOR_REGISTRATION the key must be allow-listed, or the request countersigned (label `operator`) by an operator key. Registering a registered key again answers 200 with its actor.",
  security: signed,
  request: body(schemas.ActorRegistration),
  responses: {
    201: json(schemas.Actor, "Registered"),
    200: json(schemas.Actor, "This key was already registered: its actor"),
    ...signedErrors,
    ...conflict,
  },
});

const load = createRoute({
  method: "get",
  path: "/v1/actors/{actorId}",
  tags: ["actors"],
  summary: "Load an actor",
  security: signed,
  request: { params: actorParams },
  responses: { 200: json(schemas.Actor, "The actor"), ...signedErrors },
});

const update = createRoute({
  method: "patch",
  path: "/v1/actors/{actorId}",
  tags: ["actors"],
  summary: "Change one's own addresses",
  security: signed,
  request: { params: actorParams, ...body(schemas.ActorUpdate) },
  responses: { 200: json(schemas.Actor, "Updated"), ...signedErrors },
});

const rotate = createRoute({
  method: "put",
  path: "/v1/actors/{actorId}/key",
  tags: ["actors"],
  summary: "Rotate one's own key",
  description:
    "Signed by the current key (`sig1`) and countersigned by the new key (label `new-key`, keyid `key:<new pubkey>`).",
  security: signed,
  request: { params: actorParams, ...body(schemas.KeyRotation) },
  responses: { 200: json(schemas.Actor, "Rotated"), ...signedErrors, ...conflict },
});

const whoami = createRoute({
  method: "get",
  path: "/v1/whoami",
  tags: ["actors"],
  summary: "Who the signing key belongs to",
  description:
    "The actor registered with the key that signed the request, and the runners registered with it (by context), or neither: any signer may ask, a key not registered (keyid `key:<pubkey>`) too. flowc and the console ask it to name a key that is a runner's or nobody's.",
  security: signed,
  responses: { 200: json(WhoAmI, "Who holds the key"), ...signedErrors },
});

/** Actor routes: registration, loading, addresses, key rotation, who a key is. */
export function registerActorRoutes(app: OpenAPIHono<AppEnv>): void {
  app.openapi(register, async (c) => {
    const { actor, created } = await registerActor(serviceCall(c), c.req.valid("json"));
    return created ? c.json(actor, 201) : c.json(actor, 200);
  });
  app.openapi(whoami, async (c) => c.json(await whoAmI(serviceCall(c)), 200));
  app.openapi(load, async (c) => c.json(await loadActor(serviceCall(c), c.req.valid("param").actorId), 200));
  app.openapi(update, async (c) =>
    c.json(await updateActor(serviceCall(c), c.req.valid("param").actorId, c.req.valid("json")), 200),
  );
  app.openapi(rotate, async (c) =>
    c.json(await rotateActorKey(serviceCall(c), c.req.valid("param").actorId, c.req.valid("json")), 200),
  );
}
