import { AuthError, decide, type Access } from "../../shared/auth/index.js";
import type { Context } from "../../shared/model/index.js";
import { EpochCache } from "../core/epoch-cache.js";
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
 * Contexts this isolate read, for the access checks of every request: a hit costs no storage
 * command. Only an allowing answer is taken from it (a refusal is read again, so a grant works
 * at once), and every change of a context bumps the revocation epoch (`contextChanged`): a
 * revoked permission or a changed limit holds everywhere within a second.
 */
const contexts = new EpochCache<Context>();

/**
 * Loads a context and checks that the calling actor may do `access` in it: 404 when there is no
 * such context (or one being deleted, unless `evenDeleting`), 403 naming the lists that would
 * allow it. Runners and bare keys are refused.
 * The context may come from this isolate's cache (see `contexts`) unless `fresh`.
 */
export async function contextFor(
  call: ServiceCall,
  contextId: number,
  access: Access,
  fresh = false,
  evenDeleting = false,
): Promise<Context> {
  const actorId = requireActor(call);
  const load = () => call.store.contexts.load({ id: contextId });
  const context = fresh
    ? await load()
    : ((await contexts.get(
        call.store,
        call.config.keyCacheSeconds,
        contextId,
        load,
        (cached) => decide(cached, actorId, access).allowed,
      )) as Context);
  // A context being deleted is gone for every caller; only asking to delete it again goes on.
  if (!evenDeleting) notDeleting(context);
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

/**
 * The context an event is sent to, and that the sender may send it: an actor allowed to execute
 * there (as contextFor checks), or a runner of the context (from the same cache).
 */
export async function senderContext(call: ServiceCall, contextId: number): Promise<Context> {
  const p = call.principal;
  if (p.kind !== "runner") return contextFor(call, contextId, "execute");
  if (p.contextId !== contextId)
    throw new Problem("forbidden", `runner ${p.id} is not a runner of context ${contextId}`, { needed: ["execute"] });
  const load = () => call.store.contexts.load({ id: contextId });
  const context = (await contexts.get(call.store, call.config.keyCacheSeconds, contextId, load, () => true)) as Context;
  notDeleting(context);
  return context;
}

/** A context being deleted is gone: not found. */
function notDeleting(context: Context): void {
  if (context.deleting_since !== undefined) throw new Problem("not-found", `context ${context.id} is being deleted`);
}

/**
 * After a change of a context (its lists, limits, pause, deletion): every isolate reads it again
 * within a second (the epoch), this one at once.
 */
export async function contextChanged(call: ServiceCall, contextId: number): Promise<void> {
  contexts.forget(call.store.keys.prefix, contextId);
  await call.store.keyEpoch.bump();
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
