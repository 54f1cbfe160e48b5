import type { z } from "zod";
import { isMember, type PermissionList } from "../../shared/auth/index.js";
import type { Context, ContextCreation, ContextLimitsUpdate, PermissionsUpdate } from "../../shared/model/index.js";
import { fieldProblem } from "../core/errors.js";
import { contextChanged, contextFor, requireActor } from "./access.js";
import type { FlowCall, ServiceCall } from "./call.js";
import { wakeContext } from "./wake.js";

/** 400 naming the first actor id in the lists that is not a registered actor. */
async function checkActorsExist(call: ServiceCall, lists: Partial<Record<PermissionList, number[]>>): Promise<void> {
  const entries = Object.entries(lists).flatMap(([list, ids]) =>
    (ids ?? []).map((id, i) => ({ field: `body.${list}.${i}`, id })),
  );
  if (entries.length === 0) return;
  const found = await call.store.actors.exist(entries.map(({ id }) => ({ id })));
  const missing = entries.find((_, i) => !found[i]);
  if (missing) {
    throw fieldProblem([{ field: missing.field, message: `actor ${missing.id} does not exist` }]);
  }
}

const unique = (ids: number[]) => [...new Set(ids)];

/** Creates a context; the creator becomes an admin. */
export async function createContext(call: FlowCall, input: z.output<typeof ContextCreation>): Promise<Context> {
  const creator = requireActor(call);
  const lists = {
    admins: unique([creator, ...input.admins]),
    readers: unique(input.readers),
    executors: unique(input.executors),
  };
  await checkActorsExist(call, {
    admins: lists.admins.filter((id) => id !== creator),
    readers: lists.readers,
    executors: lists.executors,
  });
  const context = await call.store.contexts.create({ ...(input.id !== undefined ? { id: input.id } : {}), ...lists });
  // Its dispatcher may keep the runner list of a context that had the id in a database since
  // wiped or replaced (it trusts a list up to 5 minutes): not one of those runners is this
  // context's, and none may be handed its work.
  await wakeContext(call, context.id, { runners: true });
  return context;
}

/**
 * The contexts the calling actor is in (any list), from a window of the deployment's context
 * index: `limit` contexts from `offset`, in id order. The window bounds the cost of a call however
 * many contexts exist, so a page may hold fewer items than `limit` (even none) while `next`, the
 * offset of the following window, says there is more to look at.
 */
export async function listContexts(
  call: ServiceCall,
  offset: number,
  limit: number,
): Promise<{ items: Context[]; next?: number }> {
  const actorId = requireActor(call);
  const page = await call.store.contexts.list({}, offset, limit);
  const items = page.items.filter((context) => isMember(context, actorId));
  return page.next === undefined ? { items } : { items, next: page.next };
}

/** Replaces all three permission lists (admins only; at least one admin stays). */
export async function setPermissions(
  call: ServiceCall,
  id: number,
  input: z.output<typeof PermissionsUpdate>,
): Promise<Context> {
  await contextFor(call, id, "admin");
  const lists = { admins: unique(input.admins), readers: unique(input.readers), executors: unique(input.executors) };
  await checkActorsExist(call, lists);
  const updated = await call.store.contexts.update({ id }, lists);
  await contextChanged(call, id);
  return updated;
}

/** Adds an actor to one list (admins only); granting twice is harmless. */
export async function grant(call: ServiceCall, id: number, list: PermissionList, actorId: number): Promise<Context> {
  await contextFor(call, id, "admin");
  await call.store.actors.load({ id: actorId });
  await call.store.contextAdmin.grant(id, list, actorId);
  await contextChanged(call, id);
  return call.store.contexts.load({ id });
}

/** Removes an actor from one list (admins only); the last admin cannot be removed. */
export async function revoke(call: ServiceCall, id: number, list: PermissionList, actorId: number): Promise<Context> {
  await contextFor(call, id, "admin");
  await call.store.contextAdmin.revoke(id, list, actorId);
  await contextChanged(call, id);
  return call.store.contexts.load({ id });
}

/**
 * Sets a context's limits (admins): `max_inflight` is read by every claim, so it holds from the
 * next one on; the dispatcher is woken, since a raised limit may let waiting work go.
 */
export async function setLimits(call: FlowCall, id: number, limits: ContextLimitsUpdate): Promise<Context> {
  await contextFor(call, id, "admin");
  await call.store.contextAdmin.setLimits(id, limits);
  await contextChanged(call, id);
  await wakeContext(call, id, { work: true });
  return call.store.contexts.load({ id });
}
