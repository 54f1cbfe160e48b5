/**
 * `npm run redis-rest`: the Upstash-compatible REST endpoint as a process.
 *
 * Env: REDIS_URL (default redis://127.0.0.1:6379), or REDIS_CLUSTER (`host:port,…`: nodes of a
 * Redis Cluster to learn it from, instead of REDIS_URL's server; cluster.ts), REST_PORT (default
 * 8079), REST_HOST (default 127.0.0.1), REST_TOKEN (generated and printed when unset),
 * REST_POOL_SIZE (64), REST_MAX_BODY_BYTES (10 MiB). Prints one line with its URL once it accepts
 * requests; stops on SIGTERM / SIGINT after closing its connections.
 */
import { randomBytes } from "node:crypto";
import { DEFAULT_REST_OPTIONS, startRestServer } from "./server.js";

function intFromEnv(name: string, fallback: number): number {
  const raw = process.env[name];
  if (raw === undefined || raw === "") return fallback;
  const value = Number(raw);
  if (!Number.isInteger(value) || value < 0) {
    console.error(`redis-rest: ${name} must be a non-negative integer (got ${JSON.stringify(raw)})`);
    process.exit(2);
  }
  return value;
}

const generated = !process.env.REST_TOKEN;
const token = process.env.REST_TOKEN || randomBytes(24).toString("base64url");

try {
  const server = await startRestServer({
    ...DEFAULT_REST_OPTIONS,
    redisUrl: process.env.REDIS_URL || DEFAULT_REST_OPTIONS.redisUrl,
    redisCluster: process.env.REDIS_CLUSTER || "",
    host: process.env.REST_HOST || DEFAULT_REST_OPTIONS.host,
    port: intFromEnv("REST_PORT", DEFAULT_REST_OPTIONS.port),
    poolSize: Math.max(1, intFromEnv("REST_POOL_SIZE", DEFAULT_REST_OPTIONS.poolSize)),
    maxBodyBytes: intFromEnv("REST_MAX_BODY_BYTES", DEFAULT_REST_OPTIONS.maxBodyBytes),
    token,
  });
  const tokenNote = generated ? ` (token ${token}, generated: set REST_TOKEN to choose one)` : "";
  const behind = process.env.REDIS_CLUSTER ? ` (the Redis Cluster at ${process.env.REDIS_CLUSTER})` : "";
  console.log(`redis-rest: ready at ${server.url}${behind}${tokenNote}`);
  const stop = (signal: string) => {
    console.log(`redis-rest: ${signal}, stopping`);
    void server.close().then(() => process.exit(0));
  };
  process.once("SIGTERM", () => stop("SIGTERM"));
  process.once("SIGINT", () => stop("SIGINT"));
} catch (error) {
  console.error(`redis-rest: cannot start: ${(error as Error).message}`);
  process.exit(1);
}
