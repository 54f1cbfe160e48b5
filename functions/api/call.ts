import type { Context } from "hono";
import { publicOrigin } from "../core/config.js";
import { afterAnswer, type FlowCall, type ServiceCall } from "../service/call.js";
import type { AppEnv } from "./app-env.js";

/** The service call for a signed route (behind `authenticate`). */
export function serviceCall(c: Context<AppEnv>): ServiceCall {
  const { store, config, principal, body } = c.var;
  if (!principal || !body) throw new Error(`${c.req.path} is not behind the signature check`);
  return { store, config, principal, body, request: c.req.raw };
}

/** The service call for a route that reaches flows' Durable Objects. */
export function flowCall(c: Context<AppEnv>): FlowCall {
  return {
    ...serviceCall(c),
    env: c.env,
    origin: publicOrigin(c.env) || new URL(c.req.url).origin,
    later: afterAnswer((work) => c.executionCtx.waitUntil(work)),
  };
}
