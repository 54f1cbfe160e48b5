import type { z } from "zod";
import { actorKeyId, bareKeyId, runnerKeyId } from "../../shared/auth/index.js";
import type { Actor, ActorRegistration, ActorUpdate, KeyRotation, WhoAmI } from "../../shared/model/index.js";
import { ConflictError } from "../../shared/store/index.js";
import { keyCache } from "../core/key-cache.js";
import { Problem } from "../core/problem.js";
import { checkAddress, requireActor } from "./access.js";
import { forgetAddresses } from "./caller-addresses.js";
import type { ServiceCall } from "./call.js";
import { verifyCountersignature } from "./countersignature.js";

/** The labels of the countersignatures that registration and rotation may need. */
const OPERATOR_LABEL = "operator";
const NEW_KEY_LABEL = "new-key";

function forbidden(detail: string): Problem {
  return new Problem("forbidden", detail);
}

/**
 * Registers an actor. The request must be signed by the key being registered (proof of
 * possession); the deployment may also demand an allow-listed key or an operator's
 * countersignature. Registering the same key again returns the actor it already is.
 */
export async function registerActor(
  call: ServiceCall,
  input: z.output<typeof ActorRegistration>,
): Promise<{ actor: Actor; created: boolean }> {
  const p = call.principal;
  if (p.kind !== "key" || p.pubkey !== input.pubkey) {
    throw forbidden(`registration must be signed by the key being registered (keyid "key:${input.pubkey}")`);
  }
  if (call.config.registration === "allowlist" && !call.config.allowlist.has(input.pubkey)) {
    throw forbidden("registration is restricted: this key is not on the allow-list (ACTOR_ALLOWLIST)");
  }
  if (call.config.registration === "operator") {
    await verifyCountersignature(
      call.request,
      call.body,
      call.config,
      OPERATOR_LABEL,
      call.config.operatorKeys,
      "registration needs an operator's countersignature",
    );
  }
  input.address.forEach((a, i) => a.type === "https" && checkAddress(call, `body.address.${i}.url`, a.url));

  const actors = call.store.actors;
  const holderId = await call.store.actorKeys.lookup(input.pubkey);
  const holder = holderId === null ? null : await actors.find({ id: holderId });
  if (holder) return existing(holder, input.id);

  let actor: Actor;
  try {
    actor = await actors.create({
      ...(input.id !== undefined ? { id: input.id } : {}),
      pubkey: input.pubkey,
      address: input.address,
    });
  } catch (error) {
    if (error instanceof ConflictError)
      throw new ConflictError("actor", String(input.id), `actor id ${input.id} is taken by another key`);
    throw error;
  }
  if (holderId !== null) {
    await call.store.actorKeys.reclaim(input.pubkey, actor.id); // the old claim's actor never appeared
    return { actor, created: true };
  }
  const winner = await call.store.actorKeys.claim(input.pubkey, actor.id);
  if (winner === actor.id) return { actor, created: true };
  // A concurrent registration of the same key won: undo ours and answer with theirs.
  await actors.delete({ id: actor.id });
  return existing(await actors.load({ id: winner }), input.id);
}

function existing(actor: Actor, requestedId: number | undefined): { actor: Actor; created: boolean } {
  if (requestedId !== undefined && requestedId !== actor.id) {
    throw new ConflictError("actor", String(requestedId), `this key is already registered as actor ${actor.id}`);
  }
  return { actor, created: false };
}

/** Loads an actor: public information for any registered actor or runner. */
export async function loadActor(call: ServiceCall, id: number): Promise<Actor> {
  if (call.principal.kind === "key") requireActor(call);
  return call.store.actors.load({ id });
}

/** An actor changes its own addresses. */
export async function updateActor(call: ServiceCall, id: number, input: z.output<typeof ActorUpdate>): Promise<Actor> {
  if (requireActor(call) !== id) throw forbidden(`only actor ${id} itself may change its addresses`);
  input.address.forEach((a, i) => a.type === "https" && checkAddress(call, `body.address.${i}.url`, a.url));
  const updated = await call.store.actors.update({ id }, { address: input.address });
  // Flows submitted from now on learn whether to POST their result here (caller-addresses.ts):
  // this isolate at once, every other within a second.
  forgetAddresses(call.store.keys.prefix, id);
  await call.store.keyEpoch.bump();
  return updated;
}

/**
 * An actor replaces its key: signed by the current key, countersigned (label `new-key`) by the
 * new one. The new key must not belong to another actor; the old one stops working at once in
 * this isolate, and within REVOCATION_CHECK_MS (a second) in every other.
 */
export async function rotateActorKey(
  call: ServiceCall,
  id: number,
  input: z.output<typeof KeyRotation>,
): Promise<Actor> {
  if (requireActor(call) !== id) throw forbidden(`only actor ${id} itself may rotate its key`);
  await verifyCountersignature(
    call.request,
    call.body,
    call.config,
    NEW_KEY_LABEL,
    new Set([input.pubkey]),
    "a key rotation must be countersigned by the new key",
  );
  const current = await call.store.actors.load({ id });
  if (current.pubkey === input.pubkey) {
    // A retry whose first try rotated the key but failed to bump the epoch: bump it now.
    await call.store.keyEpoch.bump();
    return current;
  }
  const holder = await call.store.actorKeys.claim(input.pubkey, id);
  if (holder !== id && (await call.store.actors.find({ id: holder }))) {
    throw new ConflictError("actor", String(id), `the new key is already registered as actor ${holder}`);
  }
  if (holder !== id) await call.store.actorKeys.reclaim(input.pubkey, id);
  const updated = await call.store.actors.update({ id }, { pubkey: input.pubkey });
  await call.store.actorKeys.release(current.pubkey, id);
  // Once the new key is stored: every isolate drops its cached keys within a second.
  await call.store.keyEpoch.bump();
  keyCache.forget(call.store.keys.prefix, actorKeyId(id));
  return updated;
}

/**
 * Who the key that signed the call belongs to: its actor, its runners (the first
 * WHOAMI_RUNNERS, by context), or nobody. Any signer may ask, a bare key (`key:<pubkey>`)
 * included: it learns about its own key only, whose private half it proved it holds.
 */
export async function whoAmI(call: ServiceCall): Promise<WhoAmI> {
  const p = call.principal;
  let keyid: string;
  let pubkey: string;
  if (p.kind === "key") [keyid, pubkey] = [bareKeyId(p.pubkey), p.pubkey];
  else if (p.kind === "actor")
    [keyid, pubkey] = [actorKeyId(p.id), (await call.store.actors.load({ id: p.id })).pubkey];
  else {
    const runner = await call.store.runners.load({ context_id: p.contextId, id: p.id });
    [keyid, pubkey] = [runnerKeyId(p.contextId, p.id), runner.pubkey];
  }
  const holding = await call.store.keyHolders.of(pubkey);
  return {
    keyid,
    pubkey,
    ...(holding.actorId !== undefined ? { actor_id: holding.actorId } : {}),
    runners: holding.runners.map((r) => ({ context_id: r.contextId, runner_id: r.runnerId })),
  };
}
