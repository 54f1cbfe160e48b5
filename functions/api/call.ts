import type { Context } from "hono";
import type { ServiceCall } from "../service/call.js";
import type { AppEnv } from "./store.js";

/** The service call for a signed route (behind `authenticate`). */
export function serviceCall(c: Context<AppEnv>): ServiceCall {
  const { store, config, principal, body } = c.var;
  if (!principal || !body) throw new Error(`${c.req.path} is not behind the signature check`);
  return { store, config, principal, body, request: c.req.raw };
}
