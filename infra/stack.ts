import { randomBytes } from "node:crypto";
import { existsSync, mkdirSync, readFileSync, writeFileSync } from "node:fs";
import path from "node:path";
import { DEFAULT_REST_OPTIONS, startRestServer, type RestServer } from "./redis-rest/index.js";
import { startRedisServer, type RedisServerProcess } from "./redis-server.js";
import { cronsOf, fireCrons } from "./cron.js";
import { startWranglerDev, type WranglerDev } from "./wrangler.js";
import { generateKeyPair, parsePrivateJwk } from "../shared/auth/index.js";

/**
 * The coordinator's signing key for local development: generated once into
 * `.dev/coordinator-key.json` and reused, so runners trusting it keep working across restarts.
 */
async function devCoordinatorKey(devDir: string): Promise<string> {
  const file = path.join(devDir, "coordinator-key.json");
  if (existsSync(file)) return JSON.stringify(parsePrivateJwk(readFileSync(file, "utf8"), file));
  const jwk = JSON.stringify(await generateKeyPair());
  writeFileSync(file, `${jwk}\n`, { mode: 0o600 });
  return jwk;
}

/** The project's wrangler.toml (wrangler dev finds it by looking up from its working folder). */
const WRANGLER_TOML = path.resolve(import.meta.dirname, "..", "wrangler.toml");

export interface LocalStackOptions {
  /** The project folder; its `.dev/` holds Redis's data folder and the Worker's env file. */
  root: string;
  /** Use this Redis instead of starting redis-server. */
  redisUrl?: string;
  redisPort: number;
  restPort: number;
  workerPort: number;
  /** Extra Worker vars (`--var`). */
  vars?: Record<string, string>;
  /** Receives one line per component once it is up, and wrangler's output when `verbose`. */
  log: (line: string) => void;
  verbose?: boolean;
}

/** The three local components: redis-server (unless one was given), REST endpoint, Worker. */
export interface LocalStack {
  redisUrl: string;
  restUrl: string;
  restToken: string;
  workerUrl: string;
  stop(): Promise<void>;
}

/**
 * Brings up the local stack in order: redis-server, the Upstash-compatible REST endpoint in
 * front of it, and `wrangler dev --test-scheduled` wired to the endpoint. If a later component
 * fails, the earlier ones are stopped again.
 */
export async function startLocalStack(options: LocalStackOptions): Promise<LocalStack> {
  const devDir = path.join(options.root, ".dev");
  mkdirSync(devDir, { recursive: true });
  const started: { stop(): Promise<void> }[] = [];
  const stopAll = async () => {
    for (const component of started.reverse()) await component.stop().catch(() => {});
  };
  try {
    let redis: RedisServerProcess | undefined;
    let redisUrl = options.redisUrl;
    if (!redisUrl) {
      redis = await startRedisServer({ port: options.redisPort, dir: path.join(devDir, "redis") });
      started.push(redis);
      redisUrl = redis.url;
      options.log(`redis-server  ${redisUrl}  (data folder .dev/redis, nothing kept on disk)`);
    } else {
      options.log(`redis         ${redisUrl}  (REDIS_URL, not started here)`);
    }

    const restToken = randomBytes(24).toString("base64url");
    const rest: RestServer = await startRestServer({
      ...DEFAULT_REST_OPTIONS,
      redisUrl,
      port: options.restPort,
      token: restToken,
    });
    started.push({ stop: () => rest.close() });
    options.log(`redis-rest    ${rest.url}  (Upstash REST protocol, token in .dev/worker.env)`);

    const envFile = path.join(devDir, "worker.env");
    const signingKey = await devCoordinatorKey(devDir);
    writeFileSync(
      envFile,
      `UPSTASH_REDIS_REST_URL=${rest.url}\nUPSTASH_REDIS_REST_TOKEN=${restToken}\nCOORDINATOR_SIGNING_KEY='${signingKey}'\n`,
      { mode: 0o600 },
    );
    // Durable Object storage is as lasting as the Redis it goes with: with a Redis of our own
    // (which keeps nothing), a fresh folder in memory, gone on stop; with REDIS_URL's, kept in
    // .dev between runs (a run on a Redis of our own leaves that folder alone).
    const worker: WranglerDev = await startWranglerDev({
      port: options.workerPort,
      envFile,
      cwd: options.root,
      ...(redis ? {} : { persistTo: path.join(devDir, "wrangler-state") }),
      // Local runners and actors listen on plain http://127.0.0.1.
      vars: { ALLOW_INSECURE_HTTP: "true", ...options.vars },
      ...(options.verbose ? { onLine: (line: string) => options.log(`  wrangler | ${line}`) } : {}),
    });
    started.push(worker);
    options.log(`worker        ${worker.url}  (wrangler dev --test-scheduled; try ${worker.url}/health)`);
    // wrangler dev never fires cron triggers: the supervisor's sweep runs on its schedule here.
    const crons = cronsOf(WRANGLER_TOML);
    const firer = fireCrons(worker.url, crons, options.log);
    started.push({ stop: async () => firer.stop() });
    options.log(
      `cron          ${crons.join(", ") || "none"}  (the scheduled handler, fired on schedule as in production)`,
    );

    return { redisUrl, restUrl: rest.url, restToken, workerUrl: worker.url, stop: stopAll };
  } catch (error) {
    await stopAll();
    throw error;
  }
}
