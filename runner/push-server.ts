import { createServer as createHttpsServer } from "node:https";
import type { AddressInfo } from "node:net";
import { serve, type ServerType } from "@hono/node-server";
import { Hono, type Context } from "hono";
import type { ContentfulStatusCode } from "hono/utils/http-status";
import { AuthError, signAnswer, verifyRequest, type RequestSigner } from "../shared/auth/index.js";
import { readBoundedBody } from "../shared/http/body.js";
import {
  CancelPayload,
  MAX_DELIVERIES_PER_POST,
  type DeliveryPayload,
  type DeliveryReport,
} from "../shared/model/index.js";
import type { CoordinatorKeyDirectory } from "./coordinator-keys.js";
import type { RunnerLog } from "./job.js";

/** A signed `{ "cancel": {...} }` from the coordinator: stop this attempt. */
export type CancelRequest = CancelPayload["cancel"];

/** What the runner makes of a verified, well-formed delivery. */
export type Acceptance =
  /** Taken: it runs now (202). */
  | "accepted"
  /**
   * Taken, and the answer waits for how it ended: with a report, it is answered 200 `{ "report":
   * {...} }`, signed (the acknowledgement and the result in one); without, 202 as "accepted".
   * `unanswered` is called when the coordinator hung up before the answer was written.
   */
  | { ending: Promise<DeliveryReport | undefined>; unanswered?: () => void }
  /** This attempt already runs or ran here: answered 200, not run again (deliveries are at-least-once). */
  | "duplicate"
  /** At the concurrency limit (429): the coordinator tries another runner. */
  | "busy"
  /** Draining (503): no new work. */
  | "draining"
  /** Not for this runner, or a script type it has no executor for (422). */
  | { refused: string }
  /** Cannot be stored now (a fleet gateway whose NATS is away): 503, the coordinator tries again later. */
  | { unavailable: string };

/** Where the push server listens, how it verifies, and what it hands verified deliveries to. */
export interface PushServerOptions {
  host: string;
  port: number;
  /** PEM files' contents: with both, the server speaks HTTPS. */
  tls?: { cert: Buffer; key: Buffer };
  keys: CoordinatorKeyDirectory;
  /** The runner's key: it signs answers that report how an attempt ended (needed when `accept` answers `{ ending }`). */
  signer?: RequestSigner;
  /** How far a signature's `created` may be from now (s); the coordinator uses the same default. */
  skewSeconds: number;
  /** Parses a verified body; a string says what is wrong. */
  parse(body: unknown): DeliveryPayload | string;
  accept(payload: DeliveryPayload): Acceptance | Promise<Acceptance>;
  /**
   * The coordinator cancels an attempt (a flow was cancelled): true when it was running here (a
   * fleet gateway: passed on). A rejection is answered 503, for the coordinator to try again.
   */
  cancel(request: CancelRequest): boolean | Promise<boolean>;
  /** What `GET /health` tells (load, draining); without it, `routes` serve `/health`. */
  health?(): Record<string, unknown>;
  /** More routes, mounted before the deliveries' catch-all (a fleet gateway's operations routes, its own `/health`). */
  routes?(app: Hono): void;
  log: RunnerLog;
}

/** A listening push server. */
export interface PushServer {
  /** Where the server listens, e.g. `http://127.0.0.1:8090/`. */
  url: string;
  close(): Promise<void>;
}

/** Deliveries are job messages and their env: anything this large is not one, or a batch of them. */
const MAX_BODY_BYTES = 4 * 1024 * 1024;

/**
 * The push endpoint: the coordinator POSTs each job attempt here, signed with its key (RFC 9421,
 * keyid = the key's kid in its key directory). Every delivery is verified before its body is
 * even parsed: no signature, an unknown key, a bad signature, a stale `created`, a replayed nonce
 * or a body that does not match its Content-Digest is a 401 and nothing happens. The 2xx answer
 * is the acknowledgement, so it is sent as soon as the job is taken, not when it ends, unless
 * `accept` holds it for the job's end (`{ ending }`, `--answer-within`): then it may carry the
 * result, signed with `signer` as the answer to that request. A runner
 * registered with `deliveries_per_post` above 1 may get several in one POST, `{ "deliveries":
 * [...] }`: each is taken as if alone, and the answer (200) is `{ "results": [...] }`, the status
 * and body each would have been answered with, in order.
 * `GET /health` answers without a signature (it tells nothing but load and draining).
 */
export async function startPushServer(options: PushServerOptions): Promise<PushServer> {
  const app = pushApp(options, new NonceLedger((2 * options.skewSeconds + 60) * 1000));
  return serveApp(app, options);
}

/**
 * Serves `app` on `host:port` (port 0: any free one), over HTTPS with `tls`; resolves once it
 * listens, with its URL and how to close it (open keep-alive connections dropped).
 */
export async function serveApp(
  app: Hono,
  listen: { host: string; port: number; tls?: { cert: Buffer; key: Buffer } },
): Promise<PushServer> {
  const base = {
    fetch: app.fetch,
    port: listen.port,
    hostname: listen.host,
    // The runner may run in-process next to other code (tests, an embedding app) that uses
    // fetch: its global Request/Response must stay Node's own.
    overrideGlobalObjects: false,
  };
  const server = listen.tls
    ? serve({
        ...base,
        createServer: createHttpsServer,
        serverOptions: { cert: listen.tls.cert, key: listen.tls.key },
      })
    : serve(base);
  const { port } = await new Promise<AddressInfo>((resolve, reject) => {
    server.once("error", reject);
    server.once("listening", () => {
      server.off("error", reject);
      resolve(server.address() as AddressInfo);
    });
  });
  const host = listen.host.includes(":") ? `[${listen.host}]` : listen.host;
  return {
    url: `${listen.tls ? "https" : "http"}://${host}:${port}/`,
    close: () => stop(server),
  };
}

function pushApp(options: PushServerOptions, nonces: NonceLedger): Hono {
  // Routes match the path as sent, without Hono's percent-decoding.
  const app = new Hono({ getPath: (request) => new URL(request.url).pathname });
  options.routes?.(app);
  // Hono routes HEAD to GET handlers: HEAD /health stays a 405, as every non-POST but GET /health.
  const { health } = options;
  if (health) app.get("/health", (c) => (c.req.method === "GET" ? json(c, 200, health()) : notAllowed(c)));
  // Any path: the coordinator POSTs to the address the runner registered, whatever its path.
  app.post("*", (c) => deliver(c, options, nonces));
  app.notFound(notAllowed);
  app.onError((error, c) => {
    options.log.warn(`delivery handling failed: ${error.message}`);
    return problem(c, 500, "internal", error.message);
  });
  return app;
}

function notAllowed(c: Context): Response {
  return problem(c, 405, "method-not-allowed", "deliveries are POSTed", { allow: "POST" });
}

async function deliver(c: Context, options: PushServerOptions, nonces: NonceLedger): Promise<Response> {
  const body = await readBoundedBody(c.req.raw, MAX_BODY_BYTES);
  if (!body) return problem(c, 413, "too-large", `a delivery is at most ${MAX_BODY_BYTES} bytes`);

  const now = Math.floor(Date.now() / 1000);
  let nonce: string;
  try {
    const verified = await verifyRequest(signedRequest(c), {
      body,
      now,
      skewSeconds: options.skewSeconds,
      resolveKey: (kid) => options.keys.resolve(kid),
    });
    nonce = `${verified.keyid} ${verified.nonce}`;
  } catch (error) {
    if (!(error instanceof AuthError)) throw error;
    options.log.warn(`refused an unauthenticated delivery (401 ${error.code}): ${error.message}`);
    return problem(c, 401, error.code, error.message);
  }
  if (!nonces.use(nonce)) {
    options.log.warn("refused a replayed delivery (401 nonce-replayed)");
    return problem(c, 401, "nonce-replayed", "this signature's nonce was already used");
  }

  let raw: unknown;
  try {
    raw = JSON.parse(new TextDecoder().decode(body));
  } catch {
    return problem(c, 400, "invalid-body", "the body is not JSON");
  }
  if (raw && typeof raw === "object" && "cancel" in raw) {
    const parsed = CancelPayload.safeParse(raw);
    if (!parsed.success) {
      return problem(
        c,
        400,
        "invalid-body",
        "a cancel names context_id, flow_id, job_id, caller_id, message_id and attempt",
      );
    }
    const { cancel } = parsed.data;
    let stopped: boolean;
    try {
      stopped = await options.cancel(cancel);
    } catch (error) {
      options.log.warn(
        `cancel of message ${cancel.caller_id}:${cancel.message_id} not passed on: ${(error as Error).message}`,
      );
      return problem(c, 503, "unavailable", `the cancel could not be passed on now: ${(error as Error).message}`);
    }
    options.log.info(
      `cancel of message ${cancel.caller_id}:${cancel.message_id} attempt ${cancel.attempt}: ${stopped ? "stopping it" : "not running here"}`,
    );
    return json(c, 200, { cancelled: stopped });
  }
  if (raw && typeof raw === "object" && "deliveries" in raw) {
    const { deliveries } = raw as { deliveries: unknown };
    if (!Array.isArray(deliveries) || deliveries.length < 1 || deliveries.length > MAX_DELIVERIES_PER_POST) {
      return problem(c, 400, "invalid-body", `deliveries is a list of 1 to ${MAX_DELIVERIES_PER_POST} deliveries`);
    }
    // Taken one after another, each knowing the ones before it; their ends are awaited together.
    const answers: Promise<Answer>[] = [];
    for (const item of deliveries) answers.push((await take(options, item, c.req.raw.signal)).answer);
    const results = (await Promise.all(answers)).map((one) => ({ status: one.status, ...one.body }));
    const took = results.filter((r) => r.status < 300).length;
    const ended = results.filter((r) => "report" in r).length;
    const told = ended > 0 ? `; ${ended} answered with their result` : "";
    options.log.info(`a POST of ${results.length} deliveries: ${took} taken, ${results.length - took} refused${told}`);
    return respond(c, { status: 200, body: { results } }, ended > 0 ? options.signer : undefined);
  }
  const one = await (await take(options, raw, c.req.raw.signal)).answer;
  return respond(c, one, "report" in one.body ? options.signer : undefined);
}

/** The answer; signed by `signer` as the answer to this request when it reports an attempt's end. */
async function respond(c: Context, answer: Answer, signer?: RequestSigner): Promise<Response> {
  // A refusal is a problem (RFC 9457); taking one is plain JSON.
  const type = answer.status < 300 ? "application/json" : "application/problem+json";
  const body = new TextEncoder().encode(JSON.stringify(answer.body));
  const signed = signer ? await signAnswer(signedRequest(c), answer.status, body, signer) : {};
  return c.body(body, answer.status, { ...answer.headers, ...signed, "content-type": type });
}

/** How one delivery is answered: alone, as the response; in a batch, `body` is its result. */
interface Answer {
  status: ContentfulStatusCode;
  body: Record<string, unknown>;
  headers?: Record<string, string>;
}

/**
 * Takes one delivery (or refuses it), and says how it is answered: at once, or, for one taken to
 * be answered with its end, once it ended or its time to answer ran out (wrapped, so that taking
 * the deliveries of a batch need not wait for their ends). `hungUp` aborts when the coordinator
 * closed the connection before the answer was written.
 */
async function take(
  options: PushServerOptions,
  raw: unknown,
  hungUp: AbortSignal,
): Promise<{ answer: Promise<Answer> }> {
  const payload = options.parse(raw);
  if (typeof payload === "string") {
    options.log.warn(`refused a malformed delivery (400): ${payload}`);
    return { answer: Promise.resolve(refusal(400, "invalid-body", payload)) };
  }
  const acceptance = await options.accept(payload);
  const key = `${payload.message.caller_id}:${payload.message.id} attempt ${payload.attempt}`;
  if (typeof acceptance === "object" && "ending" in acceptance) {
    const { unanswered } = acceptance;
    const lost = () => {
      options.log.warn(`the coordinator hung up before the answer to ${key}: its result goes as a report`);
      unanswered?.();
    };
    if (unanswered && hungUp.aborted) lost();
    else if (unanswered) hungUp.addEventListener("abort", lost, { once: true });
    return {
      answer: acceptance.ending.then((report): Answer =>
        report ? { status: 200, body: { report } } : { status: 202, body: { accepted: key } },
      ),
    };
  }
  return { answer: Promise.resolve(answerTo(options, key, acceptance)) };
}

/** How an acceptance that needs no waiting is answered. */
function answerTo(
  options: PushServerOptions,
  key: string,
  acceptance: Exclude<Acceptance, { ending: unknown }>,
): Answer {
  switch (acceptance) {
    case "accepted":
      return { status: 202, body: { accepted: key } };
    case "duplicate":
      return { status: 200, body: { duplicate: key } };
    case "busy":
      options.log.info(`refused delivery of message ${key}: at the concurrency limit (429)`);
      return refusal(429, "busy", "this runner is at its concurrency limit", { "retry-after": "1" });
    case "draining":
      options.log.info(`refused delivery of message ${key}: draining (503)`);
      return refusal(503, "draining", "this runner is draining: it takes no new work");
  }
  if ("unavailable" in acceptance) {
    options.log.warn(`refused delivery of message ${key} (503): ${acceptance.unavailable}`);
    return refusal(503, "unavailable", acceptance.unavailable, { "retry-after": "1" });
  }
  options.log.warn(`refused delivery of message ${key} (422): ${acceptance.refused}`);
  return refusal(422, "refused", acceptance.refused);
}

function refusal(
  status: ContentfulStatusCode,
  type: string,
  detail: string,
  headers: Record<string, string> = {},
): Answer {
  return { status, body: { type: `/problems/${type}`, title: type, status, detail }, headers };
}

/**
 * The request as the coordinator signed it. Its URL is the adapter's: the scheme of the socket
 * (https behind `tls`), the Host header and the request target, which is the runner's registered
 * address the coordinator signed as `@target-uri`. A request replayed to another runner with a
 * doctored Host still names its runner in the body, which `accept` checks. Host and the framing
 * headers (which proxies rewrite) are left out, as the verifier has always seen the request.
 */
export function signedRequest(c: Context): Request {
  const headers = new Headers();
  for (const [name, value] of c.req.raw.headers) {
    if (!["host", "content-length", "connection", "transfer-encoding"].includes(name)) headers.set(name, value);
  }
  return new Request(c.req.url, { method: c.req.method, headers });
}

function json(c: Context, status: ContentfulStatusCode, body: unknown): Response {
  return c.body(JSON.stringify(body), status, { "content-type": "application/json" });
}

/** An RFC 9457 problem answer, `type` a `/problems/<type>` path. */
export function problem(
  c: Context,
  status: ContentfulStatusCode,
  type: string,
  detail: string,
  headers: Record<string, string> = {},
): Response {
  const answer = refusal(status, type, detail, headers);
  return c.body(JSON.stringify(answer.body), status, { ...headers, "content-type": "application/problem+json" });
}

/** Stops listening and drops open (keep-alive) connections, so `close` does not wait on idle clients. */
function stop(server: ServerType): Promise<void> {
  return new Promise((resolve) => {
    server.close(() => resolve());
    if ("closeAllConnections" in server) server.closeAllConnections();
  });
}

/** Nonces seen while their signatures could still be fresh: a replayed delivery is refused. */
export class NonceLedger {
  private readonly seen = new Map<string, number>();

  constructor(private readonly ttlMs: number) {}

  use(nonce: string, now = Date.now()): boolean {
    const until = this.seen.get(nonce);
    if (until !== undefined && until > now) return false;
    if (this.seen.size > 1000) for (const [key, expires] of this.seen) if (expires <= now) this.seen.delete(key);
    this.seen.set(nonce, now + this.ttlMs);
    return true;
  }
}
