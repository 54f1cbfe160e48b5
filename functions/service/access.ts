import { AuthError, decide, type Access } from "../../shared/auth/index.js";
import type { Context } from "../../shared/model/index.js";
import { fieldProblem } from "../core/errors.js";
import { unauthorized } from "../core/principal.js";
import { Problem } from "../core/problem.js";
import type { ServiceCall } from "./call.js";

/** The calling actor's id; a runner or a bare key may not do what only actors do. */
export function requireActor(call: ServiceCall): number {
  const p = call.principal;
  if (p.kind === "actor") return p.id;
  if (p.kind === "key") {
    throw unauthorized(
      new AuthError("unknown-key", "a bare key (keyid key:...) can only register its actor; sign as actor:<id>"),
    );
  }
  throw new Problem("forbidden", "runners cannot do this; sign as an actor", { needed: ["actor"] });
}

/**
 * Loads a context and checks that the calling actor may do `access` in it: 404 when there is no
 * such context, 403 naming the lists that would allow it. Runners and bare keys are refused.
 */
export async function contextFor(call: ServiceCall, contextId: number, access: Access): Promise<Context> {
  const actorId = requireActor(call);
  const context = await call.store.contexts.load({ id: contextId });
  const decision = decide(context, actorId, access);
  if (!decision.allowed) {
    throw new Problem(
      "forbidden",
      `actor ${actorId} needs to be in ${decision.needed.join(" or ")} of context ${contextId}`,
      { needed: decision.needed },
    );
  }
  return context;
}

/** Refuses plain-http addresses unless the deployment allows them (local development). */
export function checkAddress(call: ServiceCall, field: string, url: string): void {
  if (url.startsWith("http://") && !call.config.allowInsecureHttp) {
    throw fieldProblem(
      [{ field, message: "must be an https URL (http is allowed only with ALLOW_INSECURE_HTTP=true)" }],
      `${field}: must be an https URL`,
    );
  }
}
