import http from "node:http";
import { timingSafeEqual } from "node:crypto";
import type { AddressInfo } from "node:net";
import { CommandError, toCommand, toCommandList, type Command } from "./commands.js";
import { parseRedisUrl, RedisUnavailableError } from "./connection.js";
import { toOutcome } from "./encoding.js";
import { ConnectionPool } from "./pool.js";
import { ErrorReply, type Reply } from "./resp.js";

export interface RestServerOptions {
  redisUrl: string;
  token: string;
  /** 0 picks a free port. */
  port: number;
  host: string;
  poolSize: number;
  maxBodyBytes: number;
  connectTimeoutMs: number;
  acquireTimeoutMs: number;
}

export const DEFAULT_REST_OPTIONS = {
  redisUrl: "redis://127.0.0.1:6379",
  port: 8079,
  host: "127.0.0.1",
  poolSize: 64,
  maxBodyBytes: 10 * 1024 * 1024,
  connectTimeoutMs: 2_000,
  acquireTimeoutMs: 10_000,
} as const;

export interface RestServer {
  /** Base URL to hand to `@upstash/redis` as `url`. */
  url: string;
  close(): Promise<void>;
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

/**
 * Starts the Upstash-compatible REST endpoint: `POST /` (one command), `POST /pipeline`,
 * `POST /multi-exec` (MULTI/EXEC on one connection) and the path form `/<command>/<arg>...`,
 * behind `Authorization: Bearer <token>`, in front of the redis-server `redisUrl` names.
 */
export async function startRestServer(options: RestServerOptions): Promise<RestServer> {
  if (!options.token) throw new Error("the REST endpoint needs a token");
  const pool = new ConnectionPool(parseRedisUrl(options.redisUrl), {
    size: options.poolSize,
    connectTimeoutMs: options.connectTimeoutMs,
    acquireTimeoutMs: options.acquireTimeoutMs,
  });
  const expectedAuth = Buffer.from(`Bearer ${options.token}`);

  const server = http.createServer((req, res) => {
    handle(req, pool, expectedAuth, options.maxBodyBytes)
      .catch((error: unknown) => failure(error))
      .then((answer) => {
        const body = JSON.stringify(answer.body);
        res.writeHead(answer.status, {
          "content-type": "application/json",
          "content-length": Buffer.byteLength(body),
        });
        res.end(body);
      })
      .catch(() => res.destroy());
  });
  server.keepAliveTimeout = 30_000;

  await new Promise<void>((resolve, reject) => {
    server.once("error", reject);
    server.listen(options.port, options.host, () => resolve());
  });
  const { port } = server.address() as AddressInfo;
  const host = options.host.includes(":") ? `[${options.host}]` : options.host;
  return {
    url: `http://${host}:${port}`,
    close: () =>
      new Promise<void>((resolve) => {
        pool.close();
        server.close(() => resolve());
        server.closeAllConnections();
      }),
  };
}

async function handle(
  req: http.IncomingMessage,
  pool: ConnectionPool,
  expectedAuth: Buffer,
  maxBodyBytes: number,
): Promise<Answer> {
  const auth = Buffer.from(req.headers.authorization ?? "");
  if (auth.length !== expectedAuth.length || !timingSafeEqual(auth, expectedAuth)) {
    req.resume();
    return { status: 401, body: { error: "Unauthorized" } };
  }
  const base64 = String(req.headers["upstash-encoding"] ?? "").toLowerCase() === "base64";
  const path = new URL(req.url ?? "/", "http://localhost").pathname;
  const body = await readBody(req, maxBodyBytes);

  if (req.method === "POST" && (path === "/" || path === "")) {
    const [reply] = await pool.run([toCommand(parseJson(body))]);
    return single(reply ?? null, base64);
  }
  if (req.method === "POST" && path === "/pipeline") {
    const replies = await pool.run(toCommandList(parseJson(body)));
    return { status: 200, body: replies.map((r) => toOutcome(r, base64)) };
  }
  if (req.method === "POST" && path === "/multi-exec") {
    return multiExec(pool, toCommandList(parseJson(body)), base64);
  }
  if ((req.method === "GET" || req.method === "POST") && path.length > 1) {
    // The path form: `/set/key/value`; a POST body is the last argument (the one way to send
    // bytes a URL cannot carry comfortably).
    const args = path.slice(1).split("/").map(decodeURIComponent);
    if (req.method === "POST" && body.length > 0) args.push(body.toString("utf8"));
    const [reply] = await pool.run([toCommand(args)]);
    return single(reply ?? null, base64);
  }
  throw new HttpError(req.method === "POST" || req.method === "GET" ? 404 : 405, "ERR unknown endpoint");
}

/**
 * The answer to one command (`POST /` or the path form): the outcome a pipeline entry would be,
 * but a Redis error is also the request's status, 400, as Upstash answers it.
 */
function single(reply: Reply, base64: boolean): Answer {
  const outcome = toOutcome(reply, base64);
  return { status: "error" in outcome ? 400 : 200, body: outcome };
}

/** MULTI, the commands, EXEC: all on one connection, so nothing interleaves. */
async function multiExec(pool: ConnectionPool, commands: Command[], base64: boolean): Promise<Answer> {
  const replies = await pool.run([["MULTI"], ...commands, ["EXEC"]]);
  const exec = replies[replies.length - 1] ?? null;
  if (exec instanceof ErrorReply) {
    // EXECABORT: a command was refused while queueing; name it, as Redis's text alone does not.
    const queued = replies.slice(1, -1).find((r) => r instanceof ErrorReply);
    const reason = queued instanceof ErrorReply ? `: ${queued.message}` : "";
    return { status: 400, body: { error: `${exec.message.replace(/\.$/, "")}${reason}` } };
  }
  if (!Array.isArray(exec)) return { status: 400, body: { error: "ERR transaction was not executed" } };
  return { status: 200, body: exec.map((r) => toOutcome(r, base64)) };
}

function readBody(req: http.IncomingMessage, limit: number): Promise<Buffer> {
  const declared = Number(req.headers["content-length"] ?? 0);
  if (declared > limit) {
    req.resume();
    return Promise.reject(new HttpError(413, `ERR max request size exceeded (${limit} bytes)`));
  }
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    let size = 0;
    req.on("data", (chunk: Buffer) => {
      size += chunk.length;
      if (size > limit) {
        req.removeAllListeners("data");
        req.resume();
        reject(new HttpError(413, `ERR max request size exceeded (${limit} bytes)`));
        return;
      }
      chunks.push(chunk);
    });
    req.on("end", () => resolve(Buffer.concat(chunks)));
    req.on("error", reject);
  });
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
