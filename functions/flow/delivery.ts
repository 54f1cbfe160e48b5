import { signRequest } from "../../shared/auth/index.js";
import type { DeliveryPayload, Runner } from "../../shared/model/index.js";

export type { DeliveryPayload };
import type { CoordinatorKey } from "../coordinator-key.js";

/** A W3C traceparent continuing the flow's trace into the delivery (a fresh span per POST). */
function traceparent(traceId: string | undefined): Record<string, string> {
  if (!traceId || !/^[0-9a-f]{32}$/.test(traceId)) return {};
  const span = [...crypto.getRandomValues(new Uint8Array(8))].map((b) => b.toString(16).padStart(2, "0")).join("");
  return { traceparent: `00-${traceId}-${span}-01` };
}

/** How a push went: taken (2xx), the runner is busy (429/503: try another), or it failed. */
export type DeliveryOutcome = "delivered" | "busy" | "failed";

const DELIVERY_TIMEOUT_MS = 10_000;

/** The callbacks of a job's attempt under its webhook URL. */
export function callbacks(base: string): DeliveryPayload["callbacks"] {
  return { ack: `${base}/ack`, started: `${base}/started`, heartbeat: `${base}/heartbeat`, result: `${base}/result`, logs: `${base}/logs` };
}

/** POSTs a job message to a push runner, signed with the coordinator's key. A 2xx is the ack. */
export async function deliver(runner: Runner, payload: DeliveryPayload, key: CoordinatorKey): Promise<DeliveryOutcome> {
  const request = new Request(runner.address, {
    method: "POST",
    headers: {
      "content-type": "application/json",
      "x-coordinator-message": `${payload.message.caller_id}:${payload.message.id}`,
      ...traceparent(payload.message.trace_id),
    },
    body: JSON.stringify(payload),
  });
  try {
    const signed = await signRequest(request, { keyid: key.kid, key: key.key });
    const response = await fetch(signed, { signal: AbortSignal.timeout(DELIVERY_TIMEOUT_MS) });
    await response.body?.cancel();
    if (response.ok) return "delivered";
    return response.status === 429 || response.status === 503 ? "busy" : "failed";
  } catch {
    return "failed";
  }
}

/** What a push runner receives to stop an attempt: the job, the attempt, and why. */
export interface CancelPayload {
  cancel: { context_id: number; flow_id: number; job_id: number; attempt: number; caller_id: number; message_id: number; reason: string };
}

/**
 * Tells a push runner to stop an attempt (a signed POST to its address, like a delivery). Best
 * effort: a runner that misses it learns on its next report, which is answered 409.
 */
export async function cancelAtRunner(runner: Runner, payload: CancelPayload, key: CoordinatorKey): Promise<boolean> {
  if (!runner.address) return false;
  const request = new Request(runner.address, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(payload) });
  try {
    const response = await fetch(await signRequest(request, { keyid: key.kid, key: key.key }), { signal: AbortSignal.timeout(DELIVERY_TIMEOUT_MS) });
    await response.body?.cancel();
    return response.ok;
  } catch {
    return false;
  }
}
