import { randomHex, signedRequest } from "../../shared/auth/index.js";
import type { CancelPayload, DeliveryPayload, Message } from "../../shared/model/index.js";
import type { CoordinatorKey } from "../core/coordinator-key.js";

/** A W3C traceparent continuing the flow's trace into the delivery (a fresh span per POST). */
function traceparent(traceId: string | undefined): Record<string, string> {
  if (!traceId || !/^[0-9a-f]{32}$/.test(traceId)) return {};
  return { traceparent: `00-${traceId}-${randomHex(8)}-01` };
}

/**
 * How a push went: taken (2xx), or not, with what the runner answered (`answered 503`) or why it
 * could not be reached, for operators and for the job's error should it never be delivered.
 */
export type DeliveryOutcome = { delivered: true } | { delivered: false; reason: string };

const DELIVERY_TIMEOUT_MS = 10_000;

/** The callbacks of a job's attempt under its webhook URL. */
function callbacks(base: string): DeliveryPayload["callbacks"] {
  return {
    ack: `${base}/ack`,
    started: `${base}/started`,
    heartbeat: `${base}/heartbeat`,
    result: `${base}/result`,
    logs: `${base}/logs`,
  };
}

/**
 * What a runner receives for an attempt of a job message, push or pull alike: the message, where
 * its job lives, and the callbacks under `base` (the job's webhook URL).
 */
export function deliveryPayload(message: Message, runnerId: number, base: string): DeliveryPayload {
  const job = message.job[0];
  if (!job) throw new Error(`message ${message.caller_id}:${message.id} carries no job to deliver`);
  return {
    message,
    context_id: message.context_id,
    flow_id: job.flow_id,
    job_id: job.id,
    attempt: message.attempt ?? 1,
    runner_id: runnerId,
    callbacks: callbacks(base),
  };
}

/** POSTs a job message to a push runner's address, signed with the coordinator's key. A 2xx is the ack. */
export async function deliver(
  address: string,
  payload: DeliveryPayload,
  key: CoordinatorKey,
): Promise<DeliveryOutcome> {
  try {
    const signed = await signedRequest(
      address,
      {
        method: "POST",
        headers: {
          "content-type": "application/json",
          "x-coordinator-message": `${payload.message.caller_id}:${payload.message.id}`,
          ...traceparent(payload.message.trace_id),
        },
        body: JSON.stringify(payload),
      },
      { keyid: key.kid, key: key.key },
    );
    const response = await fetch(signed, { signal: AbortSignal.timeout(DELIVERY_TIMEOUT_MS) });
    // Read to its end, which costs the Worker less than cancelling it (a runner's answer is short).
    await response.arrayBuffer();
    if (response.ok) return { delivered: true };
    return {
      delivered: false,
      reason: `answered ${response.status}${response.statusText ? ` ${response.statusText}` : ""}`,
    };
  } catch (error) {
    const timedOut = error instanceof Error && (error.name === "TimeoutError" || error.name === "AbortError");
    return {
      delivered: false,
      reason: timedOut
        ? `did not answer within ${DELIVERY_TIMEOUT_MS / 1000} s`
        : `could not be reached (${(error as Error).message})`,
    };
  }
}

/**
 * Tells a push runner to stop an attempt (a signed POST to its address, like a delivery). Best
 * effort: a runner that misses it learns on its next report, which is answered 409.
 */
export async function cancelAtRunner(address: string, payload: CancelPayload, key: CoordinatorKey): Promise<boolean> {
  if (!address) return false;
  try {
    const request = await signedRequest(
      address,
      { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(payload) },
      { keyid: key.kid, key: key.key },
    );
    const response = await fetch(request, { signal: AbortSignal.timeout(DELIVERY_TIMEOUT_MS) });
    await response.arrayBuffer();
    return response.ok;
  } catch {
    return false;
  }
}
