import type { Context } from "../model/index.js";

/** The model's three permission lists of a context. */
export const PERMISSION_LISTS = ["admins", "readers", "executors"] as const;
export type PermissionList = (typeof PERMISSION_LISTS)[number];

/**
 * What an operation needs: `admin` (create, delete, manage permissions), `read` (load and list),
 * `execute` (update job status and results, take jobs from runner queues). Admins may do
 * everything; executors may also read, since a job must be read to be run.
 */
export type Access = "admin" | "read" | "execute";

const GRANTED_BY: Record<Access, PermissionList[]> = {
  admin: ["admins"],
  read: ["admins", "readers", "executors"],
  execute: ["admins", "executors"],
};

export type Decision = { allowed: true } | { allowed: false; needed: PermissionList[] };

/** Whether an actor is in any of a context's lists (may read in it, and send chat and mail there). */
export function isMember(context: Pick<Context, PermissionList>, actorId: number): boolean {
  return decide(context, actorId, "read").allowed;
}

/** Decides whether an actor may do `access` in a context, and if not, which lists would do. */
export function decide(context: Pick<Context, PermissionList>, actorId: number, access: Access): Decision {
  const lists = GRANTED_BY[access];
  return lists.some((list) => context[list].includes(actorId)) ? { allowed: true } : { allowed: false, needed: lists };
}
