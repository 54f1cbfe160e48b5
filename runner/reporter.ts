import { signRequest, type RequestSigner } from "../shared/auth/index.js";
import { parseAnswerBody, sleep } from "../shared/client/index.js";

/** How a signed POST to the coordinator went. */
export type PostOutcome =
  | { ok: true; status: number; body: unknown }
  /** `stop`: the coordinator says this attempt is not ours any more (409 stale-attempt, 403): stop working on it. */
  | { ok: false; stop: boolean; status: number; detail: string };

/** Per-call retry settings of Reporter.post. */
export interface PostOptions {
  /** Give up retrying after this long (ms). */
  retryForMs?: number;
}

/** Where and as whom the Reporter sends. */
export interface ReporterOptions {
  /** The coordinator's base URL (`--url`). */
  baseUrl: string;
  signer: RequestSigner;
  /** Where warnings go. */
  warn(line: string): void;
}

const DEFAULT_RETRY_FOR_MS = 60_000;
/** First retry delay; doubles up to MAX_DELAY_MS. */
const INITIAL_DELAY_MS = 250;
const MAX_DELAY_MS = 8_000;
/** One request's deadline: a coordinator that hangs is retried like one that fails. */
const REQUEST_TIMEOUT_MS = 15_000;

/**
 * Sends the runner's signed requests (RFC 9421 with the runner's key, keyid
 * `runner:<context>:<id>`): webhooks and leases. Delivery to the coordinator is at-least-once:
 * network errors, 5xx and 429 are retried with exponential backoff, each try signed afresh (a new
 * nonce: the coordinator refuses a replayed one). The webhooks are idempotent on the
 * coordinator's side, so a retry of a report whose answer was lost is harmless.
 */
export class Reporter {
  private readonly base: URL;

  constructor(private readonly options: ReporterOptions) {
    this.base = new URL(options.baseUrl);
  }

  /**
   * The URL to call for a callback of a delivery. The coordinator names itself by the origin
   * requests reach it at (or its PUBLIC_URL, or nothing when a background sweep relayed the
   * job): when that origin is empty or not the one this runner was told to use, the path is
   * resolved against `--url`, since that is the address known to reach the coordinator from here.
   */
  resolve(callback: string): string {
    let url: URL;
    try {
      url = new URL(callback);
    } catch {
      return new URL(callback, this.base).href;
    }
    return url.origin === this.base.origin ? url.href : new URL(`${url.pathname}${url.search}`, this.base).href;
  }

  /** POSTs `body` as JSON to `url` (a callback or an API path), signed, with retries. */
  async post(url: string, body: unknown, options: PostOptions = {}): Promise<PostOutcome> {
    const target = this.resolve(url);
    const deadline = Date.now() + (options.retryForMs ?? DEFAULT_RETRY_FOR_MS);
    let delay = INITIAL_DELAY_MS;
    for (let attempt = 1; ; attempt++) {
      let outcome: PostOutcome | { retry: string };
      try {
        outcome = await this.once(target, body);
      } catch (error) {
        outcome = { retry: (error as Error).message };
      }
      if (!("retry" in outcome)) return outcome;
      if (Date.now() + delay > deadline) {
        return { ok: false, stop: false, status: 0, detail: `gave up after ${attempt} tries: ${outcome.retry}` };
      }
      this.options.warn(`POST ${new URL(target).pathname} failed (${outcome.retry}); retrying in ${delay} ms`);
      await sleep(delay);
      delay = Math.min(delay * 2, MAX_DELAY_MS);
    }
  }

  private async once(target: string, body: unknown): Promise<PostOutcome | { retry: string }> {
    const request = new Request(target, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify(body),
    });
    const signed = await signRequest(request, this.options.signer);
    const response = await fetch(signed, { signal: AbortSignal.timeout(REQUEST_TIMEOUT_MS) });
    const text = await response.text();
    const parsed = parseAnswerBody(text);
    if (response.ok) return { ok: true, status: response.status, body: parsed };
    if (response.status >= 500 || response.status === 429)
      return { retry: `${response.status} ${describe(parsed, text)}` };
    return refusal(response.status, parsed, text);
  }
}

/** A 4xx answer (of a request, or of one report of a batch) as the outcome of that report. */
export function refusal(status: number, parsed: unknown, text = ""): PostOutcome & { ok: false } {
  // 409 stale-attempt: the coordinator moved on to another attempt; 403: not this runner's job.
  const stop = status === 403 || (status === 409 && problemType(parsed) === "stale-attempt");
  return { ok: false, stop, status, detail: `${status} ${describe(parsed, text)}` };
}

function problemType(parsed: unknown): string | undefined {
  const type =
    parsed && typeof parsed === "object" && "type" in parsed ? String((parsed as { type: unknown }).type) : undefined;
  return type?.split("/").pop();
}

function describe(parsed: unknown, text: string): string {
  if (parsed && typeof parsed === "object") {
    const p = parsed as { type?: unknown; title?: unknown; detail?: unknown };
    const name = problemType(parsed) ?? String(p.title ?? "");
    return p.detail ? `${name}: ${String(p.detail)}` : name;
  }
  return text.slice(0, 200);
}
