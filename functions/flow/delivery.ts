import type { z } from "zod";
import {
  AuthError,
  importPublicKey,
  randomHex,
  signedRequest,
  verifyAnswer,
  type RequestSigner,
} from "../../shared/auth/index.js";
import { readBounded } from "../../shared/http/body.js";
import {
  formatBytes,
  SIZE_LIMITS,
  DeliveryAnswer,
  DeliveryBatchAnswer,
  type CancelPayload,
  type DeliveryPayload,
  type DeliveryReport,
  type EnvVars,
  type Message,
} from "../../shared/model/index.js";

/** A W3C traceparent continuing the flow's trace into the delivery (a fresh span per POST). */
function traceparent(traceId: string | undefined): Record<string, string> {
  if (!traceId || !/^[0-9a-f]{32}$/.test(traceId)) return {};
  return { traceparent: `00-${traceId}-${randomHex(8)}-01` };
}

/**
 * How a push went: taken (2xx), with how the attempt ended if the runner's signed answer said so
 * (`report`); not taken, with what the runner answered (`answered 503`) or why it could not be
 * reached; or not known (`"unknown"`): the POST may have reached the runner and no answer says
 * whether it took it (none came in time, a gateway's 504, an answer cut after its 2xx status, a
 * batch answered 2xx without one result per delivery). The reason is for operators, and for the
 * job's error should it never be delivered.
 */
export type DeliveryOutcome =
  | { delivered: true; report?: DeliveryReport }
  | { delivered: false; reason: string }
  | { delivered: "unknown"; reason: string };

/** A delivery the runner did not take (`unknown`: or may have). */
function notTaken(reason: string, unknown: boolean): DeliveryOutcome {
  return { delivered: unknown ? "unknown" : false, reason };
}

/** Where deliveries go: a push runner's address, how many one POST may carry, and its keys. */
export interface PushTarget {
  address: string;
  perPost: number;
  /** The keyid and public key an answer that reports how an attempt ended is signed with. */
  keyid: string;
  pubkey: string;
  /** How long the runner has to answer a POST (DELIVERY_TIMEOUT_MS). */
  timeoutMs: number;
}

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
 * What a runner receives for an attempt of a job message, push or pull alike: the message with
 * the environment its job runs in (`env`, built from the flow's state as it goes out: storage
 * keeps the job's own variables only), where its job lives, and the callbacks under `base` (the
 * job's webhook URL); `script`, when given, the script it runs (a map's instance's message
 * leaves it out).
 */
export function deliveryPayload(
  message: Message,
  env: EnvVars,
  runnerId: number,
  base: string,
  script?: string,
): DeliveryPayload {
  const job = message.job[0];
  if (!job) throw new Error(`message ${message.caller_id}:${message.id} carries no job to deliver`);
  return {
    message: { ...message, job: [{ ...job, ...(script !== undefined ? { script } : {}), env_vars: env }] },
    context_id: message.context_id,
    flow_id: job.flow_id,
    job_id: job.id,
    attempt: message.attempt ?? 1,
    runner_id: runnerId,
    callbacks: callbacks(base),
  };
}

/**
 * The most characters of deliveries one POST carries, however many `deliveries_per_post` allows:
 * even all in 3-byte UTF-8, well under the reference runner's 4 MiB body limit (a larger
 * delivery goes alone, as it always did).
 */
const MAX_POST_CHARS = 1024 * 1024;

/**
 * POSTs deliveries to a push runner, signed with the coordinator's key, at most `perPost` in one
 * POST: alone, a delivery is the body (a 2xx is its acknowledgement); together,
 * `{ "deliveries": [...] }`, answered with one result per delivery (`DeliveryBatchAnswer`). An
 * answer may also report how an attempt ended (`report`), when it is signed by the runner as the
 * answer to that POST (`verifyAnswer`); one that is not is a refusal. The outcomes come back in
 * the payloads' order, one promise each, settled when its own POST is answered: what one POST
 * brought back can be recorded while the others are still on the way, so that a runner with
 * room for two POSTs gets the next one while the first's results are committed. One signature
 * and one request for many deliveries is what a runner registered with `deliveries_per_post`
 * above 1 saves the Worker.
 */
export function pushDeliveries(
  target: PushTarget,
  payloads: readonly DeliveryPayload[],
  signer: RequestSigner,
): Promise<DeliveryOutcome>[] {
  const posts: { at: number[]; bodies: string[]; chars: number }[] = [];
  payloads.forEach((payload, i) => {
    const body = JSON.stringify(payload);
    const last = posts.at(-1);
    if (last && last.at.length < target.perPost && last.chars + body.length <= MAX_POST_CHARS) {
      last.at.push(i);
      last.bodies.push(body);
      last.chars += body.length;
    } else posts.push({ at: [i], bodies: [body], chars: body.length });
  });
  const outcomes: Promise<DeliveryOutcome>[] = [];
  for (const { at, bodies } of posts) {
    const [first] = at as [number];
    const answers =
      at.length === 1
        ? deliver(target, payloads[first] as DeliveryPayload, bodies[0] as string, signer).then((one) => [one])
        : deliverMany(target, bodies, signer);
    at.forEach((index, i) => {
      outcomes[index] = answers.then((all) => all[i] as DeliveryOutcome);
    });
  }
  return outcomes;
}

/** One delivery alone: a 2xx is the acknowledgement. */
async function deliver(target: PushTarget, payload: DeliveryPayload, body: string, signer: RequestSigner) {
  const headers = {
    "content-type": "application/json",
    "x-coordinator-message": `${payload.message.caller_id}:${payload.message.id}`,
    ...traceparent(payload.message.trace_id),
  };
  const read = async (response: Response, request: Request): Promise<DeliveryOutcome> => {
    if (!response.ok) return { delivered: false, reason: answered(response) };
    const answer = await reportedIn(response, request, target, DeliveryAnswer);
    if ("refused" in answer) return { delivered: false, reason: answer.refused };
    if ("unread" in answer) return { delivered: "unknown", reason: answer.unread };
    return answer.read?.report ? { delivered: true, report: answer.read.report } : { delivered: true };
  };
  return post<DeliveryOutcome>(target, headers, body, signer, read, notTaken);
}

/** Several deliveries in one POST: each is acknowledged by its own result's 2xx. */
async function deliverMany(target: PushTarget, bodies: string[], signer: RequestSigner): Promise<DeliveryOutcome[]> {
  const body = `{"deliveries":[${bodies.join(",")}]}`;
  const all = (outcome: DeliveryOutcome) => bodies.map(() => outcome);
  const read = async (response: Response, request: Request): Promise<DeliveryOutcome[]> => {
    if (!response.ok) return all({ delivered: false, reason: answered(response) });
    const answer = await reportedIn(response, request, target, DeliveryBatchAnswer);
    if ("refused" in answer) return all({ delivered: false, reason: answer.refused });
    if ("unread" in answer) return all({ delivered: "unknown", reason: answer.unread });
    if (answer.read?.results.length !== bodies.length) {
      // It may have taken any of them: none is sent again.
      return all({
        delivered: "unknown",
        reason: `answered ${response.status} without one result per delivery (${bodies.length} sent)`,
      });
    }
    return answer.read.results.map((result): DeliveryOutcome => {
      if (result.status < 200 || result.status >= 300) {
        return { delivered: false, reason: `answered ${result.status}${result.detail ? ` (${result.detail})` : ""}` };
      }
      return result.report ? { delivered: true, report: result.report } : { delivered: true };
    });
  };
  return post(target, { "content-type": "application/json" }, body, signer, read, (reason, unknown) =>
    all(notTaken(reason, unknown)),
  );
}

/**
 * A 2xx answer's body as `schema` reads it (undefined when it is not JSON of that shape: an
 * acknowledgement says nothing more), or why it is refused: it reports how an attempt ended
 * (`"report"`) but does not parse, or is not signed by the runner as the answer to `request`.
 */
async function reportedIn<T>(
  response: Response,
  request: Request,
  target: PushTarget,
  schema: z.ZodType<T>,
): Promise<{ read: T | undefined } | { refused: string } | { unread: string }> {
  const bytes = await readBounded(response, SIZE_LIMITS.answer);
  if (!bytes) {
    // Taken (a 2xx), but whatever it reports is not read: as a delivery whose answer never came.
    return {
      unread: `answered ${response.status} with a body over ${formatBytes(SIZE_LIMITS.answer)}, the most an answer may carry (docs/limits.md): what it reported was not read`,
    };
  }
  const text = decoder.decode(bytes);
  let json: unknown;
  try {
    json = JSON.parse(text);
  } catch {
    return { read: undefined };
  }
  const parsed = schema.safeParse(json);
  const reports = mentionsReport(json);
  if (!parsed.success) {
    return reports
      ? { refused: `answered ${response.status} with a report that does not parse: ${firstIssue(parsed.error)}` }
      : { read: undefined };
  }
  if (!reports) return { read: parsed.data };
  try {
    await verifyAnswer(response, bytes, request, target.keyid, await runnerKey(target.pubkey));
  } catch (error) {
    if (!(error instanceof AuthError)) throw error;
    return {
      refused: `answered ${response.status} with a report not signed by the runner (${error.code}: ${error.message})`,
    };
  }
  return { read: parsed.data };
}

/** What is wrong first in an answer's body: where, and what. */
function firstIssue(error: z.ZodError): string {
  const issue = error.issues[0];
  return issue ? `${issue.path.join(".") || "the body"}: ${issue.message}` : error.message;
}

/** Whether an answer's body (alone, or a batch's results) has a `report`, well-formed or not. */
function mentionsReport(json: unknown): boolean {
  const has = (item: unknown) => typeof item === "object" && item !== null && "report" in item;
  if (has(json)) return true;
  const results = typeof json === "object" && json !== null && "results" in json ? json.results : undefined;
  return Array.isArray(results) && results.some(has);
}

const decoder = new TextDecoder();

/** Runners' public keys, imported once per isolate (a cache keyed by the key itself). */
const runnerKeys = new Map<string, Promise<CryptoKey>>();

function runnerKey(pubkey: string): Promise<CryptoKey> {
  let key = runnerKeys.get(pubkey);
  if (!key) {
    if (runnerKeys.size >= 256) runnerKeys.clear();
    key = importPublicKey(pubkey);
    runnerKeys.set(pubkey, key);
    key.catch(() => runnerKeys.delete(pubkey));
  }
  return key;
}

function answered(response: Response): string {
  return `answered ${response.status}${response.statusText ? ` ${response.statusText}` : ""}`;
}

/**
 * A signed POST: what `read` makes of the answer, or what `failed` makes of why none was read,
 * with whether the runner may have taken it all the same (`unknown`). It may have when nothing
 * said otherwise after the request could have reached it: no answer within `timeoutMs`, a 504 (a
 * gateway in front of the runner gave up waiting for it, as this would), an answer whose 2xx
 * status came and the rest did not. It did not when it could not be reached. workerd tells a
 * connection refused and one cut after the request went out apart by nothing ("Network
 * connection lost." both): such a cut counts as not reached, as a refusal does.
 */
async function post<T>(
  { address, timeoutMs }: PushTarget,
  headers: Record<string, string>,
  body: string,
  signer: RequestSigner,
  read: (response: Response, request: Request) => T | Promise<T>,
  failed: (reason: string, unknown: boolean) => T,
): Promise<T> {
  let signed: Request;
  let response: Response;
  try {
    signed = await signedRequest(address, { method: "POST", headers, body }, signer);
    response = await fetch(signed, { signal: AbortSignal.timeout(timeoutMs) });
  } catch (error) {
    if (timedOut(error)) return failed(`did not answer within ${timeoutMs / 1000} s`, true);
    return failed(`could not be reached (${(error as Error).message})`, false);
  }
  try {
    if (response.status === 504) {
      await response.arrayBuffer().catch(() => undefined);
      return failed(`${answered(response)}: a gateway's timeout`, true);
    }
    const outcome = await read(response, signed);
    // Read to its end, which costs the Worker less than cancelling it (a runner's answer is short).
    if (!response.bodyUsed) await response.arrayBuffer().catch(() => undefined);
    return outcome;
  } catch (error) {
    const how = timedOut(error) ? `did not end within ${timeoutMs / 1000} s` : `was cut (${(error as Error).message})`;
    return failed(`answered ${response.status}, and the rest of the answer ${how}`, response.ok);
  }
}

function timedOut(error: unknown): boolean {
  return error instanceof Error && (error.name === "TimeoutError" || error.name === "AbortError");
}

/**
 * Tells a push runner to stop an attempt (a signed POST to its address, like a delivery). Best
 * effort: a runner that misses it learns on its next report, which is answered 409.
 */
export async function cancelAtRunner(
  address: string,
  payload: CancelPayload,
  signer: RequestSigner,
  timeoutMs: number,
): Promise<boolean> {
  if (!address) return false;
  try {
    const request = await signedRequest(
      address,
      { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(payload) },
      signer,
    );
    const response = await fetch(request, { signal: AbortSignal.timeout(timeoutMs) });
    await response.arrayBuffer();
    return response.ok;
  } catch {
    return false;
  }
}
