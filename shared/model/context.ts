import { z } from "zod";
import { Id, Timestamp } from "./common.js";

const ActorIds = z.array(Id).max(10_000);

/** A tenant: its permission lists. Everything else of the context lives in its key namespace. */
export const Context = z
  .object({
    id: Id,
    admins: ActorIds,
    readers: ActorIds,
    executors: ActorIds,
    created_at: Timestamp,
    updated_at: Timestamp,
  })
  .strict();
export type Context = z.infer<typeof Context>;
