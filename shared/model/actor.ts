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

/** How many runners a WhoAmI answer names at the most. */
export const WHOAMI_RUNNERS = 20;

/**
 * `GET /v1/whoami`: who the key that signed the request belongs to. A person holding a key file
 * learns whether it is an actor's (which), a runner's (which, in which contexts), or nobody's yet,
 * so that flowc and the console can name it instead of answering "unknown key".
 */
export const WhoAmI = z
  .object({
    keyid: z.string().describe("The keyid the request was signed with"),
    pubkey: PublicKey,
    actor_id: Id.optional().describe("The actor registered with this key, if any"),
    runners: z
      .array(z.object({ context_id: Id, runner_id: Id }).strict())
      .max(WHOAMI_RUNNERS)
      .describe(`Runners registered with this key, by context (the first ${WHOAMI_RUNNERS})`),
  })
  .strict()
  .meta({ id: "WhoAmI" });
export type WhoAmI = z.infer<typeof WhoAmI>;
