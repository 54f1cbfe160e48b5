import { timingSafeEqual } from "node:crypto";
import type { AddressInfo } from "node:net";
import { serve, type HttpBindings, type ServerType } from "@hono/node-server";
import { Hono, type Context, type MiddlewareHandler } from "hono";
import type { ContentfulStatusCode } from "hono/utils/http-status";
import { readBoundedBody } from "../../shared/http/body.js";
import type { Backend } from "./backend.js";
import { ClusterBackend } from "./cluster.js";
import { CommandError, toCommand, toCommandList, type Command } from "./commands.js";
import { parseRedisUrl, RedisUnavailableError } from "./connection.js";
import { toOutcome } from "./encoding.js";
import { ConnectionPool } from "./pool.js";
import { ErrorReply, type Reply } from "./resp.js";

/** Where the endpoint listens, the Redis it fronts, and its limits. */
export interface RestServerOptions {
  redisUrl: string;
  /**
   * A Redis Cluster instead of `redisUrl`'s server: `host:port,…` of nodes to learn it from
   * (cluster.ts). Unset or empty: the single server.
   */
  redisCluster?: string;
  token: string;
  /** 0 picks a free port. */
  port: number;
  host: string;
  poolSize: number;
  maxBodyBytes: number;
  connectTimeoutMs: number;
  /**
   * How long a request may wait for a free connection (a single server), or for the cluster
   * (through a failover's retries), before it is answered 503.
   */
  acquireTimeoutMs: number;
}

/** The endpoint's defaults; `npm run redis-rest` overrides them from the environment. */
export const DEFAULT_REST_OPTIONS = {
  redisUrl: "redis://127.0.0.1:6379",
  port: 8079,
  host: "127.0.0.1",
  poolSize: 64,
  maxBodyBytes: 10 * 1024 * 1024,
  connectTimeoutMs: 2_000,
  acquireTimeoutMs: 10_000,
} as const;

/** A listening REST endpoint. */
export interface RestServer {
  /** Base URL to hand to `@upstash/redis` as `url`. */
  url: string;
  /** Stops listening, drops open connections and closes the connections to Redis. */
  close(): Promise<void>;
  /**
   * What the endpoint sent to Redis since it started: requests that reached Redis and the
   * commands in them (a transaction's MULTI and EXEC included). The benchmark counts with it.
   */
  sent(): { requests: number; commands: number };
  /**
   * Records the requests that reach Redis until the returned function is called, which gives
   * them back: per request, its commands' names (an EVALSHA as `EVALSHA <sha1>`). With `keys`,
   * a command other than a script's is told with its first argument (`GET metrics:kept`): what
   * tells one caller's commands from those the Worker sends meanwhile in the background.
   */
  record(options?: { keys?: boolean }): () => string[][];
  /**
   * The largest request body the endpoint took and the largest answer it sent since it started
   * (bytes): what docs/limits.md's worst cases are checked against.
   */
  largest(): { request: number; response: number };
}

/** An answer: HTTP status plus the JSON body Upstash would send. */
interface Answer {
  status: number;
  body: unknown;
}

class HttpError extends Error {
  constructor(
    readonly status: number,
    message: string,
  ) {
    super(message);
  }
}

/** The Node request next to Hono's view of it, and the body read once by `limitBody`. */
type RestEnv = { Bindings: HttpBindings; Variables: { body: Buffer } };

/** The largest request and answer so far, and the most either may be. */
interface Sizes {
  limit: number;
  request: number;
  response: number;
}

/**
 * Starts the Upstash-compatible REST endpoint: `POST /` (one command), `POST /pipeline`,
 * `POST /multi-exec` (MULTI/EXEC on one connection) and the path form `/<command>/<arg>...`,
 * behind `Authorization: Bearer <token>`, in front of the redis-server `redisUrl` names.
 */
export async function startRestServer(options: RestServerOptions): Promise<RestServer> {
  if (!options.token) throw new Error("the REST endpoint needs a token");
  const backend: Backend = options.redisCluster
    ? await ClusterBackend.open({
        seeds: options.redisCluster,
        connectTimeoutMs: options.connectTimeoutMs,
        requestTimeoutMs: options.acquireTimeoutMs,
      })
    : new ConnectionPool(parseRedisUrl(options.redisUrl), {
        size: options.poolSize,
        connectTimeoutMs: options.connectTimeoutMs,
        acquireTimeoutMs: options.acquireTimeoutMs,
      });
  const sizes: Sizes = { limit: options.maxBodyBytes, request: 0, response: 0 };
  const app = restApp(backend, Buffer.from(`Bearer ${options.token}`), sizes);

  const server = serve({
    fetch: app.fetch,
    port: options.port,
    hostname: options.host,
    // This server runs inside other processes (the test runner, the dev stack) that use fetch
    // for their own work: their global Request/Response must stay Node's own.
    overrideGlobalObjects: false,
    serverOptions: { keepAliveTimeout: 30_000 },
  });
  const { port } = await listening(server);
  const host = options.host.includes(":") ? `[${options.host}]` : options.host;
  return {
    url: `http://${host}:${port}`,
    sent: () => ({ requests: backend.sent.batches, commands: backend.sent.commands }),
    largest: () => ({ request: sizes.request, response: sizes.response }),
    record: (options) => {
      const requests: string[][] = [];
      backend.watcher = (commands) =>
        requests.push(
          commands.map(([name, first]) => {
            const upper = String(name).toUpperCase();
            if (upper === "EVALSHA") return `EVALSHA ${String(first)}`;
            return options?.keys && upper !== "EVAL" && first !== undefined ? `${upper} ${String(first)}` : upper;
          }),
        );
      return () => {
        backend.watcher = undefined;
        return requests;
      };
    },
    close: () =>
      new Promise<void>((resolve) => {
        void backend.close();
        server.close(() => resolve());
        if ("closeAllConnections" in server) server.closeAllConnections();
      }),
  };
}

/** Where `serve` ended up listening (the real port when 0 was asked for). */
function listening(server: ServerType): Promise<AddressInfo> {
  return new Promise((resolve, reject) => {
    server.once("error", reject);
    server.once("listening", () => resolve(server.address() as AddressInfo));
  });
}

function restApp(backend: Backend, expectedAuth: Buffer, sizes: Sizes): Hono<RestEnv> {
  // Routes match the path as sent, percent-escapes and all (Hono decodes by default): `/%70ipeline`
  // is a command named `pipeline` in the path form, not the pipeline endpoint.
  const app = new Hono<RestEnv>({ getPath: (request) => new URL(request.url).pathname });
  app.use(bearer(expectedAuth), limitBody(sizes));
  const send = answerWithin(sizes);

  app.post("/", async (c) => {
    const [reply] = await backend.run([toCommand(parseJson(c.var.body))]);
    return send(c, single(reply ?? null, base64(c)));
  });
  app.post("/pipeline", async (c) => {
    const replies = await backend.run(toCommandList(parseJson(c.var.body)));
    return send(c, { status: 200, body: replies.map((r) => toOutcome(r, base64(c))) });
  });
  app.post("/multi-exec", async (c) =>
    send(c, await multiExec(backend, toCommandList(parseJson(c.var.body)), base64(c))),
  );
  app.on(["GET", "POST"], "/*", async (c) => {
    // The path form: `/set/key/value`; a POST body is the last argument (the one way to send
    // bytes a URL cannot carry comfortably). Hono routes HEAD here as GET: it is no command.
    const path = c.req.path;
    if (path.length <= 1 || c.req.method === "HEAD") return c.notFound();
    const args = path.slice(1).split("/").map(decodeURIComponent);
    if (c.req.method === "POST" && c.var.body.length > 0) args.push(c.var.body.toString("utf8"));
    const [reply] = await backend.run([toCommand(args)]);
    return send(c, single(reply ?? null, base64(c)));
  });

  app.notFound((c) => {
    const status = c.req.method === "POST" || c.req.method === "GET" ? 404 : 405;
    return send(c, failure(new HttpError(status, "ERR unknown endpoint")));
  });
  app.onError((error, c) => send(c, failure(error)));
  return app;
}

/**
 * `Authorization: Bearer <token>`, compared in constant time. Not hono/bearer-auth, which
 * answers some malformed headers 400 and adds WWW-Authenticate: every refusal here is 401
 * `{"error":"Unauthorized"}`. Node's parsed header keeps the first of repeated Authorization
 * lines, where Fetch Headers would join them.
 */
function bearer(expected: Buffer): MiddlewareHandler<RestEnv> {
  return async (c, next) => {
    const auth = Buffer.from(c.env.incoming.headers.authorization ?? "");
    if (auth.length !== expected.length || !timingSafeEqual(auth, expected)) {
      return send(c, { status: 401, body: { error: "Unauthorized" } });
    }
    await next();
  };
}

/**
 * Reads the whole body once, before routing, refusing it with 413 past `limit` bytes: up front
 * on its declared Content-Length (whatever the method), or while reading a chunked body.
 * Not hono/body-limit: its chunked path rebuilds the Request with the global constructor, which
 * fails on the adapter's lightweight Request unless the adapter overrides the globals.
 */
function limitBody(sizes: Sizes): MiddlewareHandler<RestEnv> {
  return async (c, next) => {
    const bytes = await readBoundedBody(c.req.raw, sizes.limit);
    if (!bytes) return send(c, failure(new HttpError(413, `ERR max request size exceeded (${sizes.limit} bytes)`)));
    sizes.request = Math.max(sizes.request, bytes.length);
    c.set("body", Buffer.from(bytes.buffer, bytes.byteOffset, bytes.length));
    await next();
  };
}

function base64(c: Context<RestEnv>): boolean {
  return (c.req.header("upstash-encoding") ?? "").toLowerCase() === "base64";
}

/**
 * Sends answers no larger than a request may be, as Upstash refuses to read back more than its
 * request limit in one request; counts the largest.
 */
function answerWithin(sizes: Sizes): (c: Context<RestEnv>, answer: Answer) => Response {
  return (c, answer) => {
    const response = send(c, answer);
    const length = Number(response.headers.get("content-length"));
    if (length > sizes.limit) {
      return send(
        c,
        failure(
          new HttpError(413, `ERR max request size exceeded: an answer of ${length} bytes (at most ${sizes.limit})`),
        ),
      );
    }
    sizes.response = Math.max(sizes.response, length);
    return response;
  };
}

/** The JSON answer, with its Content-Length stated (Hono keeps it on the bodiless HEAD answer). */
function send(c: Context<RestEnv>, answer: Answer): Response {
  const text = JSON.stringify(answer.body);
  return c.body(text, answer.status as ContentfulStatusCode, {
    "content-type": "application/json",
    "content-length": String(Buffer.byteLength(text)),
  });
}

/**
 * The answer to one command (`POST /` or the path form): the outcome a pipeline entry would be,
 * but a Redis error is also the request's status, 400, as Upstash answers it.
 */
function single(reply: Reply, base64: boolean): Answer {
  const outcome = toOutcome(reply, base64);
  return { status: "error" in outcome ? 400 : 200, body: outcome };
}

/**
 * MULTI, the commands, EXEC: all on one connection, so nothing interleaves. On a cluster the
 * commands' keys must share a slot (else CROSSSLOT, and nothing runs).
 */
async function multiExec(backend: Backend, commands: Command[], base64: boolean): Promise<Answer> {
  const { exec, queued } = await backend.transaction(commands);
  if (exec instanceof ErrorReply) {
    // EXECABORT: a command was refused while queueing; name it, as Redis's text alone does not.
    const reason = queued ? `: ${queued.message}` : "";
    return { status: 400, body: { error: `${exec.message.replace(/\.$/, "")}${reason}` } };
  }
  if (!Array.isArray(exec)) return { status: 400, body: { error: "ERR transaction was not executed" } };
  return { status: 200, body: exec.map((r) => toOutcome(r, base64)) };
}

function parseJson(body: Buffer): unknown {
  try {
    return JSON.parse(body.toString("utf8"));
  } catch {
    throw new CommandError("ERR failed to parse the request body as JSON");
  }
}

function failure(error: unknown): Answer {
  if (error instanceof HttpError) return { status: error.status, body: { error: error.message } };
  if (error instanceof CommandError) return { status: 400, body: { error: error.message } };
  if (error instanceof RedisUnavailableError) {
    return { status: 503, body: { error: `ERR Redis is unavailable: ${error.message}` } };
  }
  return { status: 500, body: { error: `ERR internal error: ${(error as Error).message}` } };
}
