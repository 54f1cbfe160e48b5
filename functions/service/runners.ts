import type { z } from "zod";
import { runnerKeyId } from "../../shared/auth/index.js";
import {
  ScriptType,
  type Runner,
  type RunnerRegistration,
  type RunnerUpdate,
  type RunnerWithDispatch,
} from "../../shared/model/index.js";
import { RunnerKeyTakenError, type Page } from "../../shared/store/index.js";
import { fieldProblem } from "../core/errors.js";
import { keyCache } from "../core/key-cache.js";
import { Problem } from "../core/problem.js";
import { checkAddress, contextFor } from "./access.js";
import type { FlowCall, ServiceCall } from "./call.js";
import { wakeContext } from "./wake.js";

/**
 * Registers a runner in a context (admins only). Without an address it must be `local` (it pulls
 * from `queue:<script_type>`); `script_types` defaults to the runner type when that is a script
 * type; `topic` defaults to `runner<id>`.
 */
export async function createRunner(
  call: FlowCall,
  contextId: number,
  input: z.output<typeof RunnerRegistration>,
): Promise<Runner> {
  await contextFor(call, contextId, "admin");
  if (input.address) checkAddress(call, "body.address", input.address);
  const local = input.local ?? input.address === "";
  if (!local && input.address === "") {
    throw fieldProblem([
      {
        field: "body.address",
        message: "a runner needs an https address for push delivery, or local: true to pull jobs",
      },
    ]);
  }
  const asScriptType = ScriptType.safeParse(input.runner_type);
  const scriptTypes = input.script_types ?? (asScriptType.success ? [asScriptType.data] : undefined);
  if (!scriptTypes)
    throw fieldProblem([
      { field: "body.script_types", message: `required: runner type ${input.runner_type} is not a script type` },
    ]);
  const runner = await keyHeld(
    call.store.runners.create({
      ...(input.id !== undefined ? { id: input.id } : {}),
      context_id: contextId,
      pubkey: input.pubkey,
      address: input.address,
      topic: input.topic ?? "",
      local,
      runner_type: input.runner_type,
      script_types: [...new Set(scriptTypes)],
      concurrency: input.concurrency,
      deliveries_per_post: input.deliveries_per_post,
    }),
  );
  // Work may have waited for a runner like this one.
  await wakeContext(call, contextId, { runners: true });
  return runner;
}

/**
 * A runner write refused because another runner of the context holds the key: 409 naming the
 * field and the holder (`runner_id`). A public key is one runner's per context, so that removing
 * a runner or changing its key revokes the key for whoever used it (docs/runners.md, "Writing a runner").
 */
async function keyHeld<T>(write: Promise<T>): Promise<T> {
  try {
    return await write;
  } catch (error) {
    if (!(error instanceof RunnerKeyTakenError)) throw error;
    throw new Problem(
      "conflict",
      `public key ${error.pubkey} is already runner ${error.holder}'s in context ${error.contextId}: give each runner a key of its own`,
      { field: "body.pubkey", runner_id: error.holder },
    );
  }
}

/** Lists a context's runners (readers). */
export async function listRunners(
  call: ServiceCall,
  contextId: number,
  offset: number,
  limit: number,
): Promise<Page<Runner>> {
  await contextFor(call, contextId, "read");
  return call.store.runners.list({ context_id: contextId }, offset, limit);
}

/**
 * Loads a runner (readers, or the runner itself), with how dispatch stands with it: the attempts
 * it holds, and the last delivery failure and next try while deliveries to it fail.
 */
export async function loadRunner(call: ServiceCall, contextId: number, id: number): Promise<RunnerWithDispatch> {
  const p = call.principal;
  const itself = p.kind === "runner" && p.contextId === contextId && p.id === id;
  if (!itself) await contextFor(call, contextId, "read");
  const runner = await call.store.runners.load({ context_id: contextId, id });
  const [held, health] = await Promise.all([
    call.store.dispatch.held(contextId, [id]),
    call.store.dispatch.health(contextId),
  ]);
  const trouble = health.get(id);
  const secs = (ms: number) => Math.floor(ms / 1000);
  return {
    ...runner,
    dispatch: {
      in_flight: held.get(id) ?? 0,
      ...(trouble
        ? {
            last_error: trouble.last_error,
            last_error_at: secs(trouble.last_error_at),
            failures: trouble.failures,
            retry_at: secs(trouble.retry_at),
          }
        : {}),
    },
  };
}

/**
 * Changes a runner (admins only). A new key takes effect at once in this isolate, and within
 * REVOCATION_CHECK_MS (a second) in every other: the old key stops working.
 */
export async function updateRunner(
  call: FlowCall,
  contextId: number,
  id: number,
  input: z.output<typeof RunnerUpdate>,
): Promise<Runner> {
  await contextFor(call, contextId, "admin");
  if (input.address) checkAddress(call, "body.address", input.address);
  const current = await call.store.runners.load({ context_id: contextId, id });
  const address = input.address ?? current.address;
  const local = input.local ?? current.local;
  if (!local && address === "")
    throw fieldProblem([
      { field: "body.address", message: "a runner that does not pull (local: false) needs an https address" },
    ]);
  const patch = Object.fromEntries(Object.entries(input).filter(([, v]) => v !== undefined));
  const updated = await keyHeld(call.store.runners.update({ context_id: contextId, id }, patch));
  // Also when the key is already this one: a retry whose first try changed it but failed to bump.
  if (input.pubkey !== undefined) await call.store.keyEpoch.bump();
  keyCache.forget(call.store.keys.prefix, runnerKeyId(contextId, id));
  // More slots, another address or other script types: work may move now.
  await wakeContext(call, contextId, { runners: true });
  return updated;
}

/**
 * Removes a runner (admins only); its key stops working at once in this isolate, and within
 * REVOCATION_CHECK_MS (a second) in every other.
 */
export async function deleteRunner(call: FlowCall, contextId: number, id: number): Promise<void> {
  await contextFor(call, contextId, "admin");
  try {
    await call.store.runners.delete({ context_id: contextId, id });
  } finally {
    // Also when it was gone already: a retry whose first try removed it but failed to bump.
    await call.store.keyEpoch.bump();
  }
  keyCache.forget(call.store.keys.prefix, runnerKeyId(contextId, id));
  await wakeContext(call, contextId, { runners: true });
}
