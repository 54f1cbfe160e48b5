import type { Store } from "../../shared/store/index.js";
import type { Principal } from "../api/auth.js";
import type { Config } from "../config.js";

/**
 * Everything a service function gets besides its input: storage, settings, the verified caller,
 * and the signed request itself (a few operations check a second signature on it). REST routes
 * and JSON-RPC methods build the same call, so both go through the same checks.
 */
export interface ServiceCall {
  store: Store;
  config: Config;
  principal: Principal;
  request: Request;
  body: Uint8Array<ArrayBuffer>;
}
