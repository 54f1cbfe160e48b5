import { bareKeyId, type PrivateJwk } from "../shared/auth/index.js";
import { ApiError, CoordinatorClient, signerFromJwk } from "../shared/client/index.js";
import type { WhoAmI } from "../shared/model/index.js";
import type { Invocation } from "./command.js";
import { resolveConfig } from "./config.js";
import { readPrivateKey } from "./keyfile.js";
import { networkFetch } from "./session.js";

/*
 * Naming a key: a key file says nothing about whose it is, and the coordinator's "401 unknown key"
 * or "signature does not verify" does not say what the key is instead. flowc asks the coordinator
 * (GET /v1/whoami, signed with the bare key: it tells about that key only) and says it: an
 * actor's (which), a runner's (which, in which context), or nobody's.
 */

/** `runner 2 in context 5`, `runners 2 in context 5 and 1 in context 7`. */
export function runnersText(runners: WhoAmI["runners"]): string {
  const each = runners.map((r) => `${r.runner_id} in context ${r.context_id}`);
  const list = each.length <= 1 ? each.join("") : `${each.slice(0, -1).join(", ")} and ${each[each.length - 1]}`;
  return `${runners.length === 1 ? "runner" : "runners"} ${list}`;
}

/** Who holds `jwk`'s key, asked of the coordinator at `url`; undefined when it cannot say (an older coordinator). */
export async function keyOwner(url: string, jwk: PrivateJwk): Promise<WhoAmI | undefined> {
  const client = new CoordinatorClient({ baseUrl: url, fetch: networkFetch(url) });
  try {
    return await client.as(await signerFromJwk(jwk, bareKeyId(jwk.x))).whoAmI();
  } catch (error) {
    if (error instanceof ApiError && error.status === 404) return undefined;
    throw error;
  }
}

/** Whether a failure says the configured key does not sign as the configured actor. */
export function isKeyRefused(error: unknown): boolean {
  return (
    error instanceof ApiError &&
    error.status === 401 &&
    (error.code === "unknown-key" || error.code === "signature-invalid")
  );
}

/**
 * After a 401 for the configured actor's key: one line saying what the key is instead, with what
 * to do; undefined when that cannot be told (no settings, no answer). Never throws: it only adds
 * to an error already being reported.
 */
export async function explainKey(invocation: Invocation): Promise<string | undefined> {
  try {
    const config = resolveConfig(invocation.globals, invocation.env, invocation.cwd, "");
    if (!config.url || !config.keyFile) return undefined;
    const file = config.keyFile.value;
    const owner = await keyOwner(config.url.value, readPrivateKey(file, config.keyFile.source));
    if (!owner) return undefined;
    const actor = config.actorId?.value;
    if (owner.actor_id !== undefined && owner.actor_id !== actor)
      return `the key in ${file} is actor ${owner.actor_id}'s, not actor ${actor ?? "?"}'s: use --actor ${owner.actor_id} (or flowc init --actor ${owner.actor_id})`;
    if (owner.actor_id !== undefined) return undefined;
    if (owner.runners.length > 0)
      return `the key in ${file} is no actor's: it is the key of ${runnersText(owner.runners)}. An actor signs with a key of its own (flowc keygen --out <file>, flowc init --key-file <file>, flowc actor register)`;
    return `the key in ${file} is nobody's: no actor or runner is registered with it (flowc actor register registers it as a new actor)`;
  } catch {
    return undefined;
  }
}
