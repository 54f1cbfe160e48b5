import type { z } from "zod";
import { runnerKeyId } from "../../shared/auth/index.js";
import { ScriptType, type Runner, type RunnerRegistration, type RunnerUpdate } from "../../shared/model/index.js";
import type { Page } from "../../shared/store/index.js";
import { keyCache } from "../api/key-cache.js";
import { Problem } from "../api/problem.js";
import { checkAddress, contextFor } from "./access.js";
import type { ServiceCall } from "./call.js";

function invalid(field: string, message: string): Problem {
  return new Problem(400, "invalid-input", "Invalid input", `${field}: ${message}`, { field, errors: [{ field, message }] });
}

/**
 * Registers a runner in a context (admins only). Without an address it must be `local` (it pulls
 * from `queue:<script_type>`); `script_types` defaults to the runner type when that is a script
 * type; `topic` defaults to `runner<id>`.
 */
export async function createRunner(call: ServiceCall, contextId: number, input: z.output<typeof RunnerRegistration>): Promise<Runner> {
  await contextFor(call, contextId, "admin");
  if (input.address) checkAddress(call, "body.address", input.address);
  const local = input.local ?? input.address === "";
  if (!local && input.address === "") {
    throw invalid("body.address", "a runner needs an https address for push delivery, or local: true to pull jobs");
  }
  const asScriptType = ScriptType.safeParse(input.runner_type);
  const scriptTypes = input.script_types ?? (asScriptType.success ? [asScriptType.data] : undefined);
  if (!scriptTypes) throw invalid("body.script_types", `required: runner type ${input.runner_type} is not a script type`);
  return call.store.runners.create({
    ...(input.id !== undefined ? { id: input.id } : {}),
    context_id: contextId,
    pubkey: input.pubkey,
    address: input.address,
    topic: input.topic ?? "",
    local,
    runner_type: input.runner_type,
    script_types: [...new Set(scriptTypes)],
    concurrency: input.concurrency,
  });
}

/** Lists a context's runners (readers). */
export async function listRunners(call: ServiceCall, contextId: number, offset: number, limit: number): Promise<Page<Runner>> {
  await contextFor(call, contextId, "read");
  return call.store.runners.list({ context_id: contextId }, offset, limit);
}

/** Loads a runner (readers, or the runner itself). */
export async function loadRunner(call: ServiceCall, contextId: number, id: number): Promise<Runner> {
  const p = call.principal;
  const itself = p.kind === "runner" && p.contextId === contextId && p.id === id;
  if (!itself) await contextFor(call, contextId, "read");
  return call.store.runners.load({ context_id: contextId, id });
}

/** Changes a runner (admins only). A new key takes effect at once in this isolate. */
export async function updateRunner(call: ServiceCall, contextId: number, id: number, input: z.output<typeof RunnerUpdate>): Promise<Runner> {
  await contextFor(call, contextId, "admin");
  if (input.address) checkAddress(call, "body.address", input.address);
  const current = await call.store.runners.load({ context_id: contextId, id });
  const address = input.address ?? current.address;
  const local = input.local ?? current.local;
  if (!local && address === "") throw invalid("body.address", "a runner that does not pull (local: false) needs an https address");
  const patch = Object.fromEntries(Object.entries(input).filter(([, v]) => v !== undefined));
  const updated = await call.store.runners.update({ context_id: contextId, id }, patch);
  keyCache.forget(call.store.keys.prefix, runnerKeyId(contextId, id));
  return updated;
}

/** Removes a runner (admins only); its key stops working at once in this isolate. */
export async function deleteRunner(call: ServiceCall, contextId: number, id: number): Promise<void> {
  await contextFor(call, contextId, "admin");
  await call.store.runners.delete({ context_id: contextId, id });
  keyCache.forget(call.store.keys.prefix, runnerKeyId(contextId, id));
}
