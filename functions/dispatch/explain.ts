import type { Runner } from "../../shared/model/index.js";
import type { RunnerHealth, Store } from "../../shared/store/index.js";
import type { WaitReason, Want } from "../core/contracts.js";

/**
 * Explains, for each want, why no runner has the attempt yet: dispatch paused; no runner for
 * it; the context's max_inflight reached; every runner for it at its concurrency; runners
 * refusing (until when they are tried again); only pull runners, which have not leased it; or it
 * waits its turn (docs/dispatch.md, "Fairness").
 */
export async function explainWait(
  store: Store,
  contextId: number,
  runners: Runner[],
  backoff: Map<number, RunnerHealth>,
  wants: Want[],
): Promise<WaitReason[]> {
  if (wants.length === 0) return [];
  const context = await store.contexts.load({ id: contextId });
  if (context.paused) {
    return wants.map(() => ({ reason: "paused", detail: `dispatch in context ${contextId} is paused` }));
  }
  const held = await store.dispatch.held(
    contextId,
    runners.map((r) => r.id),
  );
  const inFlight = [...held.values()].reduce((sum, n) => sum + n, 0);
  const capped = context.max_inflight !== undefined && inFlight >= context.max_inflight;
  return wants.map((want) => {
    const fit =
      want.runnerId !== undefined
        ? runners.filter((r) => r.id === want.runnerId)
        : runners.filter((r) => r.script_types.includes(want.scriptType));
    const what = want.runnerId !== undefined ? `runner ${want.runnerId}` : `script type ${want.scriptType}`;
    if (fit.length === 0)
      return {
        reason: "no-runner",
        detail:
          want.runnerId !== undefined
            ? `runner ${want.runnerId} is not registered`
            : `no runner of ${what} is registered`,
      };
    if (capped)
      return {
        reason: "context-limit",
        detail: `the context's runners hold ${inFlight} attempts, its max_inflight ${context.max_inflight}`,
      };
    const withRoom = fit.filter((r) => (held.get(r.id) ?? 0) < r.concurrency);
    if (withRoom.length === 0) {
      const load = fit.map((r) => `runner ${r.id} holds ${held.get(r.id) ?? 0} of ${r.concurrency}`).join(", ");
      return { reason: "runners-busy", detail: `every runner of ${what} is at its concurrency (${load})` };
    }
    const push = withRoom.filter((r) => r.address !== "");
    const ready = push.filter((r) => !backoff.has(r.id));
    if (push.length > 0 && ready.length === 0) {
      const troubles = push.map((r) => ({ id: r.id, health: backoff.get(r.id) as RunnerHealth }));
      const until = Math.min(...troubles.map((t) => t.health.retry_at));
      const said = troubles.map((t) => `runner ${t.id} ${t.health.last_error}`).join("; ");
      return { reason: "runner-refusing", detail: `${said}; tried again at ${new Date(until).toISOString()}`, until };
    }
    if (push.length === 0) return { reason: "pull", detail: `waiting for a pull runner of ${what} to lease it` };
    return { reason: "queued", detail: `waiting its turn for a runner of ${what} (flows take turns, by priority)` };
  });
}
