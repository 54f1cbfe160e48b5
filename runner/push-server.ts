import { createServer as createHttpServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import { createServer as createHttpsServer } from "node:https";
import type { AddressInfo } from "node:net";
import { AuthError, verifyRequest } from "../shared/auth/index.js";
import type { DeliveryPayload } from "../shared/model/index.js";
import type { CoordinatorKeyDirectory } from "./coordinator-keys.js";
import type { RunnerLog } from "./job.js";

/** A signed `{ "cancel": {...} }` from the coordinator: stop this attempt. */
export interface CancelRequest {
  context_id: number;
  caller_id: number;
  message_id: number;
  attempt: number;
  reason: string;
}

/** What the runner makes of a verified, well-formed delivery. */
export type Acceptance =
  /** Taken: it runs now (202). */
  | "accepted"
  /** This attempt already runs or ran here: answered 200, not run again (deliveries are at-least-once). */
  | "duplicate"
  /** At the concurrency limit (429): the coordinator tries another runner. */
  | "busy"
  /** Draining (503): no new work. */
  | "draining"
  /** Not for this runner, or a script type it has no executor for (422). */
  | { refused: string };

/** Where the push server listens, how it verifies, and what it hands verified deliveries to. */
export interface PushServerOptions {
  host: string;
  port: number;
  /** PEM files' contents: with both, the server speaks HTTPS. */
  tls?: { cert: Buffer; key: Buffer };
  keys: CoordinatorKeyDirectory;
  /** How far a signature's `created` may be from now (s); the coordinator uses the same default. */
  skewSeconds: number;
  /** Parses a verified body; a string says what is wrong. */
  parse(body: unknown): DeliveryPayload | string;
  accept(payload: DeliveryPayload): Acceptance;
  /** The coordinator cancels an attempt (a flow was cancelled): true when it was running here. */
  cancel(request: CancelRequest): boolean;
  health(): Record<string, unknown>;
  log: RunnerLog;
}

/** A listening push server. */
export interface PushServer {
  /** Where the server listens, e.g. `http://127.0.0.1:8090/`. */
  url: string;
  close(): Promise<void>;
}

/** Deliveries are a job message and its env: anything this large is not one. */
const MAX_BODY_BYTES = 4 * 1024 * 1024;

/**
 * The push endpoint: the coordinator POSTs each job attempt here, signed with its key (RFC 9421,
 * keyid = the key's kid in its key directory). Every delivery is verified before its body is
 * even parsed: no signature, an unknown key, a bad signature, a stale `created`, a replayed nonce
 * or a body that does not match its Content-Digest is a 401 and nothing happens. The 2xx answer
 * is the acknowledgement, so it is sent as soon as the job is taken, not when it ends.
 * `GET /health` answers without a signature (it tells nothing but load and draining).
 */
export async function startPushServer(options: PushServerOptions): Promise<PushServer> {
  const nonces = new NonceLedger((2 * options.skewSeconds + 60) * 1000);
  const handler = (req: IncomingMessage, res: ServerResponse) => {
    handle(req, res, options, nonces).catch((error: Error) => {
      options.log.warn(`delivery handling failed: ${error.message}`);
      if (!res.headersSent) problem(res, 500, "internal", error.message);
      else res.end();
    });
  };
  const server: Server = options.tls ? createHttpsServer({ cert: options.tls.cert, key: options.tls.key }, handler) : createHttpServer(handler);
  await new Promise<void>((resolve, reject) => {
    server.once("error", reject);
    server.listen(options.port, options.host, () => {
      server.off("error", reject);
      resolve();
    });
  });
  const { port } = server.address() as AddressInfo;
  const host = options.host.includes(":") ? `[${options.host}]` : options.host;
  return {
    url: `${options.tls ? "https" : "http"}://${host}:${port}/`,
    close: () =>
      new Promise<void>((resolve) => {
        server.close(() => resolve());
        server.closeAllConnections();
      }),
  };
}

async function handle(req: IncomingMessage, res: ServerResponse, options: PushServerOptions, nonces: NonceLedger): Promise<void> {
  if (req.method === "GET" && (req.url === "/health" || req.url?.startsWith("/health?"))) return json(res, 200, options.health());
  if (req.method !== "POST") {
    res.setHeader("allow", "POST");
    return problem(res, 405, "method-not-allowed", "deliveries are POSTed");
  }
  const body = await readBody(req);
  if (!body) return problem(res, 413, "too-large", `a delivery is at most ${MAX_BODY_BYTES} bytes`);

  const request = toRequest(req, options.tls !== undefined);
  const now = Math.floor(Date.now() / 1000);
  let nonce: string;
  try {
    const verified = await verifyRequest(request, { body, now, skewSeconds: options.skewSeconds, resolveKey: (kid) => options.keys.resolve(kid) });
    nonce = `${verified.keyid} ${verified.nonce}`;
  } catch (error) {
    if (!(error instanceof AuthError)) throw error;
    options.log.warn(`refused an unauthenticated delivery (401 ${error.code}): ${error.message}`);
    return problem(res, 401, error.code, error.message);
  }
  if (!nonces.use(nonce)) {
    options.log.warn("refused a replayed delivery (401 nonce-replayed)");
    return problem(res, 401, "nonce-replayed", "this signature's nonce was already used");
  }

  let raw: unknown;
  try {
    raw = JSON.parse(new TextDecoder().decode(body));
  } catch {
    return problem(res, 400, "invalid-body", "the body is not JSON");
  }
  if (raw && typeof raw === "object" && "cancel" in raw) {
    const c = (raw as { cancel: Partial<CancelRequest> }).cancel;
    if (!c || typeof c.message_id !== "number" || typeof c.attempt !== "number" || typeof c.caller_id !== "number" || typeof c.context_id !== "number") {
      return problem(res, 400, "invalid-body", "a cancel names context_id, caller_id, message_id and attempt");
    }
    const stopped = options.cancel({ ...(c as CancelRequest), reason: String(c.reason ?? "cancelled") });
    options.log.info(`cancel of message ${c.caller_id}:${c.message_id} attempt ${c.attempt}: ${stopped ? "stopping it" : "not running here"}`);
    return json(res, 200, { cancelled: stopped });
  }
  const payload = options.parse(raw);
  if (typeof payload === "string") {
    options.log.warn(`refused a malformed delivery (400): ${payload}`);
    return problem(res, 400, "invalid-body", payload);
  }
  const acceptance = options.accept(payload);
  const key = `${payload.message.caller_id}:${payload.message.id} attempt ${payload.attempt}`;
  switch (acceptance) {
    case "accepted":
      return json(res, 202, { accepted: key });
    case "duplicate":
      return json(res, 200, { duplicate: key });
    case "busy":
      options.log.info(`refused delivery of message ${key}: at the concurrency limit (429)`);
      res.setHeader("retry-after", "1");
      return problem(res, 429, "busy", "this runner is at its concurrency limit");
    case "draining":
      options.log.info(`refused delivery of message ${key}: draining (503)`);
      return problem(res, 503, "draining", "this runner is draining: it takes no new work");
    default:
      options.log.warn(`refused delivery of message ${key} (422): ${acceptance.refused}`);
      return problem(res, 422, "refused", acceptance.refused);
  }
}

/** Reads the body, or null when it is larger than MAX_BODY_BYTES. */
async function readBody(req: IncomingMessage): Promise<Uint8Array<ArrayBuffer> | null> {
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of req as AsyncIterable<Buffer>) {
    size += chunk.length;
    if (size > MAX_BODY_BYTES) return null;
    chunks.push(chunk);
  }
  const out = new Uint8Array(new ArrayBuffer(size));
  out.set(Buffer.concat(chunks));
  return out;
}

/**
 * The request as the coordinator signed it: the target URI is rebuilt from the Host header and
 * the path (the coordinator signs the runner's registered address). A request replayed to
 * another runner with a doctored Host still names its runner in the body, which `accept` checks.
 */
function toRequest(req: IncomingMessage, tls: boolean): Request {
  const headers = new Headers();
  for (const [name, value] of Object.entries(req.headers)) {
    if (value === undefined || ["host", "content-length", "connection", "transfer-encoding"].includes(name)) continue;
    headers.set(name, Array.isArray(value) ? value.join(", ") : value);
  }
  const url = `${tls ? "https" : "http"}://${req.headers.host ?? "localhost"}${req.url ?? "/"}`;
  return new Request(url, { method: req.method ?? "POST", headers });
}

function json(res: ServerResponse, status: number, body: unknown): void {
  res.writeHead(status, { "content-type": "application/json" }).end(JSON.stringify(body));
}

function problem(res: ServerResponse, status: number, type: string, detail: string): void {
  res
    .writeHead(status, { "content-type": "application/problem+json" })
    .end(JSON.stringify({ type: `/problems/${type}`, title: type, status, detail }));
}

/** Nonces seen while their signatures could still be fresh: a replayed delivery is refused. */
class NonceLedger {
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
