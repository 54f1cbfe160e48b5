import { z } from "zod";
import { Address, Id, PublicKey, Timestamp } from "./common.js";

/** An identity that requests work and receives results (global, not inside a context). */
export const Actor = z
  .object({
    id: Id,
    pubkey: PublicKey,
    address: z.array(Address).max(16),
    created_at: Timestamp,
    updated_at: Timestamp,
  })
  .strict()
  .meta({ id: "Actor" });
export type Actor = z.infer<typeof Actor>;
