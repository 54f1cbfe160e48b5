import { createRoute, z, type OpenAPIHono } from "@hono/zod-openapi";
import { KEY_DIRECTORY_PATH } from "../../../shared/auth/index.js";
import { coordinatorKeys } from "../../core/coordinator-key.js";
import { ProblemBody } from "../schemas.js";
import type { AppEnv } from "../app-env.js";

/** The media type of a key directory (the web-bot-auth convention for RFC 9421 keys). */
const DIRECTORY_TYPE = "application/http-message-signatures-directory+json";

const Jwk = z
  .object({
    kid: z.string(),
    kty: z.literal("OKP"),
    crv: z.literal("Ed25519"),
    x: z.string(),
    use: z.literal("sig"),
    status: z.enum(["current", "next"]),
  })
  .openapi("CoordinatorKey");
const Directory = z.object({ keys: z.array(Jwk) }).openapi("CoordinatorKeyDirectory");

const directory = createRoute({
  method: "get",
  path: KEY_DIRECTORY_PATH,
  tags: ["operations"],
  summary: "The coordinator's public signing keys",
  description:
    "The key deliveries are signed with (`status: current`) and, during a rotation, the one that will replace it (`status: next`). `kid` is the RFC 7638 thumbprint, and the `keyid` of the coordinator's signatures.",
  responses: {
    200: { description: "Key directory", content: { [DIRECTORY_TYPE]: { schema: Directory } } },
    503: { description: "No signing key configured", content: { "application/problem+json": { schema: ProblemBody } } },
  },
});

/** `GET /.well-known/http-message-signatures-directory`, unauthenticated and cacheable. */
export function registerWellKnownRoutes(app: OpenAPIHono<AppEnv>): void {
  app.openapi(directory, async (c) => {
    const { current, next } = await coordinatorKeys(c.env);
    const entry = (k: { kid: string; x: string }, status: "current" | "next") =>
      ({ kid: k.kid, kty: "OKP", crv: "Ed25519", x: k.x, use: "sig", status }) as const;
    const keys = next ? [entry(current, "current"), entry(next, "next")] : [entry(current, "current")];
    const res = c.json({ keys }, 200, { "cache-control": "public, max-age=300" });
    res.headers.set("content-type", DIRECTORY_TYPE);
    return res;
  });
}
