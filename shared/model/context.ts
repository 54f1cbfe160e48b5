import { z } from "zod";
import { Id, Timestamp } from "./common.js";

/** A permission list: actor ids. */
export const ActorIds = z.array(Id).max(10_000);

/**
 * A tenant: its permission lists. Everything else of the context lives in its key namespace.
 * Extension: `paused` (dispatch held: no runner is given work and no mail is relayed until resumed).
 */
export const Context = z
  .object({
    id: Id,
    admins: ActorIds,
    readers: ActorIds,
    executors: ActorIds,
    paused: z.boolean().optional(),
    created_at: Timestamp,
    updated_at: Timestamp,
  })
  .strict()
  .meta({ id: "Context" });
export type Context = z.infer<typeof Context>;
