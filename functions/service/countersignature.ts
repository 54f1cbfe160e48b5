import { AuthError, importPublicKey, parseKeyId, verifyRequest } from "../../shared/auth/index.js";
import type { Config } from "../core/config.js";
import { Problem } from "../core/problem.js";

/**
 * Checks an additional signature on an already authenticated request: the countersignature of
 * an operator (registration) or of a new key (rotation). It must be labelled `label`, name its
 * key as `key:<pubkey>` with a pubkey from `allowed`, and cover what the primary signature
 * covers. Returns the key that signed; a missing or bad countersignature is a 403 naming it.
 */
export async function verifyCountersignature(
  request: Request,
  body: Uint8Array<ArrayBuffer>,
  config: Config,
  label: string,
  allowed: ReadonlySet<string>,
  needs: string,
): Promise<string> {
  try {
    const verified = await verifyRequest(request, {
      body,
      now: Math.floor(Date.now() / 1000),
      skewSeconds: config.skewSeconds,
      label,
      resolveKey: async (keyid) => {
        const parsed = parseKeyId(keyid);
        return parsed?.kind === "key" && allowed.has(parsed.pubkey) ? importPublicKey(parsed.pubkey) : null;
      },
    });
    return (parseKeyId(verified.keyid) as { pubkey: string }).pubkey;
  } catch (error) {
    if (!(error instanceof AuthError)) throw error;
    throw new Problem("countersignature-required", `${needs}: ${error.message}`, { label });
  }
}
