import type { Store } from "../../shared/store/index.js";
import type { Env } from "../core/env.js";
import { unwrap } from "../core/problem.js";
import { scopeFor, type ScopeBase } from "../core/scopes.js";
import { coordinatorStub, dispatcherStub, feedStub, schedulerStub } from "../core/stubs.js";

/** How long one step of a context's deletion may go on (a request's, or a sweep's). */
export const DELETION_STEP_MS = 20_000;

/** Objects asked at once while a context's flows are removed. */
const PARALLEL = 20;

/**
 * Carries a context's deletion on until `until` (epoch ms); true once nothing of it is left.
 * The context was marked first (ContextAdmin.beginDeletion), so no caller acts in it meanwhile.
 * Each part goes in bounded batches, in an order that keeps every step safe to interrupt and
 * repeat: its runners (their keys stop working), its schedules (no fire starts a flow), its flows
 * and jobs outside flows (each object removes its records and its own storage), its dispatcher's
 * and feed's storage, whatever else its namespace holds, and last its place in the indexes.
 * A step that fails (an object out of reach, storage away) throws; the sweep tries again.
 * `purgeDispatcher` forgets the dispatcher's storage: the Dispatcher running a step in its own
 * sweep does it itself, not through a call to itself.
 */
export async function deleteContextStep(
  env: Env,
  store: Store,
  base: ScopeBase,
  contextId: number,
  until: number,
  purgeDispatcher?: () => Promise<void>,
): Promise<boolean> {
  const admin = store.contextAdmin;
  const late = () => Date.now() > until;
  let dropped = 0;
  for (let n = await admin.dropRunners(contextId, 500); n > 0; n = await admin.dropRunners(contextId, 500)) {
    dropped += n;
    if (late()) break;
  }
  // Their keys stop working in every isolate (only when some went: a step repeated bumps nothing).
  if (dropped > 0) await store.keyEpoch.bump();
  if (late()) return false;

  for (let ids = await admin.firstMembers(contextId, "schedule", 50); ids.length > 0;) {
    for (const id of ids.map(Number)) {
      await store.schedules.remove(contextId, id);
      const scope = { prefix: base.prefix, contextId, scheduleId: id, origin: base.origin };
      unwrap(await schedulerStub(env, scope).remove(scope));
    }
    if (late()) return false;
    ids = await admin.firstMembers(contextId, "schedule", 50);
  }

  // Flows first: each takes its jobs' index entries with it, so what the job index holds after
  // them is jobs outside any flow.
  for (const index of ["flow", "job"] as const) {
    for (let ids = await admin.firstMembers(contextId, index, PARALLEL); ids.length > 0;) {
      await Promise.all(
        ids.map(async (member) => {
          const [a, b] = member.split(":").map(Number);
          const target = index === "flow" ? { flowId: a as number } : { callerId: a as number, jobId: b as number };
          const scope = scopeFor(base, contextId, target);
          unwrap(await coordinatorStub(env, scope).purge(scope, { force: true }));
        }),
      );
      if (late()) return false;
      ids = await admin.firstMembers(contextId, index, PARALLEL);
    }
  }

  const scope = { prefix: base.prefix, contextId, origin: base.origin };
  await (purgeDispatcher ? purgeDispatcher() : dispatcherStub(env, scope).purge(scope));
  await feedStub(env, scope).purge(scope);
  if (!(await admin.deleteNamespace(contextId, until))) return false;
  await admin.endDeletion(contextId);
  return true;
}
