import { spawn } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import path from "node:path";
import { DEFAULT_REST_OPTIONS, startRestServer, type RestServer } from "../../infra/redis-rest/index.js";
import { freePort, startRedisServer } from "../../infra/redis-server.js";
import type { CronFirer } from "../../infra/cron.js";
import { memoryBackedDir } from "../../infra/memory-dir.js";
import { actorKeyId, generateKeyPair, type PrivateJwk } from "../../shared/auth/index.js";
import { CoordinatorClient, signerFromJwk } from "../../shared/client/index.js";
import { Keys } from "../../shared/keys.js";
import { connectRedis, type Redis } from "../../shared/store/redis.js";
import { eventually } from "./eventually.js";
import { ANSI, startExtraWorker } from "./extra-worker.js";
import type { ExtraWorker, PrivateStackOptions, TestRunnerProcess } from "./stack-types.js";
import { pauseClients, refuseOn, sweepToEnd, type Refusal } from "./stack-storage.js";
import { watchProcess, type WatchedProcess } from "./process.js";
import {
  stackCrons,
  stackWorkerOptions,
  startWorkerProcess,
  type WorkerProcess,
  type WorkerProcessOptions,
  type WorkerTarget,
} from "./worker-process.js";
import {
  registerReferenceRunner,
  writeKeyFile,
  type RegisteredReferenceRunner,
  type RegisteredRunner,
} from "./runner-process.js";

const root = path.resolve(import.meta.dirname, "../..");

export type { ExtraWorker, PrivateStackOptions, TestRunnerProcess } from "./stack-types.js";
export { commandDelta } from "./stack-types.js";

/**
 * A stack of a test file's own: redis-server on a free port, the REST endpoint, and the Worker
 * under `wrangler dev` (or, with `target: "serve"`, on plain workerd as `npm run serve` runs
 * it). Tests that count Redis commands need one, since the shared test Redis serves every other
 * file at the same time; so do tests that stop the storage or kill runners.
 */
export async function startPrivateStack(label: string, options: PrivateStackOptions = {}): Promise<PrivateStack> {
  const dir = mkdtempSync(path.join(memoryBackedDir(), `fc-${label}-`));
  const { cluster } = options;
  const redisServer = cluster ? undefined : await startRedisServer({ port: await freePort(), dir: `${dir}/redis` });
  const token = "private-stack-token";
  const backing = cluster ? { redisUrl: "", redisCluster: cluster.seeds } : { redisUrl: redisServer?.url ?? "" };
  const restOptions = { ...DEFAULT_REST_OPTIONS, ...backing, port: 0, token };
  const rest = await startRestServer(restOptions);
  const log = { text: "" };
  // A stack over a Redis Cluster tells its Worker so (the store keeps every script to one slot).
  const vars = { ...(cluster && { STORAGE_CLUSTER: "true" }), ...options.vars };
  const workerOptions = await stackWorkerOptions(
    dir,
    root,
    { ...options, vars },
    {
      UPSTASH_REDIS_REST_URL: rest.url,
      UPSTASH_REDIS_REST_TOKEN: token,
      COORDINATOR_SIGNING_KEY: JSON.stringify(await generateKeyPair()),
    },
  );
  workerOptions.onLine = (line: string) => (log.text = `${log.text}${line.replace(ANSI, "")}\n`.slice(-200_000));
  let worker: WorkerProcess;
  try {
    worker = await startWorkerProcess(workerOptions);
  } catch (error) {
    // Nothing else will stop what was started so far: the caller never gets a stack to stop.
    await rest.close();
    await redisServer?.stop();
    rmSync(dir, { recursive: true, force: true });
    throw error;
  }
  // A restart of a serve stack runs the bundle its first start built.
  workerOptions.build = false;
  const crons = stackCrons(worker, workerOptions);
  return new PrivateStack({ dir, redisServer, restOptions, token, rest, worker, workerOptions, log, crons });
}

type RedisServer = Awaited<ReturnType<typeof startRedisServer>>;
type RestOptions = Parameters<typeof startRestServer>[0];

/** What startPrivateStack started, handed to the stack that owns it. */
interface StackParts {
  dir: string;
  /** Absent for a stack over a Redis Cluster. */
  redisServer: RedisServer | undefined;
  restOptions: RestOptions;
  /** The REST endpoint's bearer token. */
  token: string;
  rest: RestServer;
  worker: WorkerProcess;
  workerOptions: WorkerProcessOptions;
  log: { text: string };
  crons: CronFirer | undefined;
}

/**
 * A private stack, started: its clients, its runners, the faults a test may inject into its
 * storage and Worker (stop, refuse, pause, restart), the sweep fired by hand, and Redis's own
 * counts of what was sent. `stop` ends everything it started.
 */
export class PrivateStack {
  readonly dir: string;
  /** Every Redis key, as the coordinator builds it (the stack's Worker uses no prefix). */
  readonly keys: Keys;
  readonly redis: Redis;
  /** A client that signs nothing (`.as(signer)` for one that does). */
  readonly anonymous: CoordinatorClient;
  private rest: RestServer | undefined;
  private readonly restPort: number;
  private worker: WorkerProcess;
  private redisPaused = false;
  /** While storage is refused: the stand-in answering on the REST port, and what it was asked. */
  private refusing: Refusal | undefined;
  /** Every runner process started, test runners and reference runners: killed by `stop`. */
  private readonly children: WatchedProcess[] = [];
  /** Worker processes started besides the first (`startWorker`): stopped by `stop`. */
  private readonly extraWorkers: ExtraWorker[] = [];

  constructor(private readonly parts: StackParts) {
    this.dir = parts.dir;
    this.keys = new Keys("", { cluster: !parts.redisServer });
    this.rest = parts.rest;
    this.worker = parts.worker;
    this.restPort = Number(new URL(parts.rest.url).port);
    this.redis = connectRedis({ url: parts.rest.url, token: parts.token });
    this.anonymous = new CoordinatorClient({ baseUrl: parts.worker.url });
  }

  get url(): string {
    return this.worker.url;
  }

  /** How this stack runs the Worker: `wrangler dev`, or plain workerd as `npm run serve` does. */
  get target(): WorkerTarget {
    return this.parts.workerOptions.target ?? "wrangler";
  }

  /** The redis-server's own address (redis://…), for tools that speak RESP (MONITOR, a benchmark's BullMQ). */
  get redisUrl(): string {
    return this.redisServer().url;
  }

  async newActor(): Promise<{ id: number; jwk: PrivateJwk; client: CoordinatorClient }> {
    const jwk = await generateKeyPair();
    const actor = await this.anonymous.registerActor(jwk);
    return { id: actor.id, jwk, client: this.anonymous.as(await signerFromJwk(jwk, actorKeyId(actor.id))) };
  }

  /**
   * Registers a push runner of sh jobs at a free port, to be served by a test runner (with the
   * env switches of `extra`) once `start` is called: until then deliveries to it fail. With
   * `PULL` in `extra` the runner is registered without an address: a pull runner; with
   * `DELIVERIES_PER_POST`, registered to take that many deliveries in one POST. With `again`,
   * a runner the context lost is registered again, with its id and key.
   */
  async registerTestRunner(
    admin: CoordinatorClient,
    contextId: number,
    extra: Record<string, string> = {},
    concurrency = 200,
    again?: { id: number; jwk: PrivateJwk },
  ): Promise<RegisteredRunner<TestRunnerProcess>> {
    const jwk = again?.jwk ?? (await generateKeyPair());
    const port = await freePort();
    const runner = await admin.createRunner(contextId, {
      ...(again ? { id: again.id } : {}),
      pubkey: jwk.x,
      runner_type: "sh",
      ...(extra.PULL ? {} : { address: `http://127.0.0.1:${port}/` }),
      concurrency,
      ...(extra.DELIVERIES_PER_POST ? { deliveries_per_post: Number(extra.DELIVERIES_PER_POST) } : {}),
    });
    return {
      id: runner.id,
      jwk,
      port,
      start: () => this.spawnTestRunner(contextId, runner.id, jwk, { ...extra, PORT: String(port) }),
    };
  }

  /**
   * Registers a reference runner (runner/) of sh and python jobs, push at a free port or pull
   * (`local`), started as a process by `start` with the extra command line `args`.
   */
  registerReferenceRunner(
    admin: CoordinatorClient,
    contextId: number,
    mode: "push" | "pull",
    args: string[] = [],
  ): Promise<RegisteredReferenceRunner> {
    const { url, dir, children: started } = this;
    return registerReferenceRunner(admin, contextId, { url, dir, mode, args, started });
  }

  /** What the Worker (wrangler dev, workerd) printed lately: its console.log / warn / error lines. */
  workerLog(): string {
    return this.parts.log.text;
  }

  /** Stops the REST endpoint in front of Redis: the Worker's storage is unreachable. */
  async stopRest(): Promise<void> {
    const running = this.rest;
    this.rest = undefined;
    await running?.close();
  }

  /**
   * Stops the REST endpoint and answers on its port as it does when Redis is down (503,
   * `ERR Redis is unavailable`), keeping each request's body: `storageRequests` shows what the
   * Worker tried to do meanwhile.
   */
  async refuseStorage(): Promise<void> {
    await this.stopRest();
    this.refusing = await refuseOn(this.restPort);
  }

  storageRequests(): string[] {
    return this.refusing?.bodies ?? [];
  }

  /** Starts the REST endpoint again (after `stopRest` or `refuseStorage`), on the port the Worker knows. */
  async restartRest(): Promise<void> {
    const refusing = this.refusing;
    this.refusing = undefined;
    await refusing?.close();
    this.rest ??= await startRestServer({ ...this.parts.restOptions, port: this.restPort });
  }

  /** Freezes redis-server (SIGSTOP): connections stay open, nothing answers. */
  pauseRedis(): void {
    process.kill(this.redisServer().child.pid as number, "SIGSTOP");
    this.redisPaused = true;
  }

  /**
   * Holds every client's commands for `ms` (CLIENT PAUSE … ALL, sent to redis-server itself):
   * requests through the REST endpoint hang, pass the storage deadline, and are run by Redis
   * when the pause ends — the write that timed out but was applied.
   */
  pauseClients(ms: number): Promise<void> {
    return pauseClients(this.redisUrl, ms);
  }

  /** Lets a frozen redis-server go on (SIGCONT). */
  continueRedis(): void {
    process.kill(this.redisServer().child.pid as number, "SIGCONT");
    this.redisPaused = false;
  }

  /**
   * Stops the Worker (workerd and every Durable Object in memory with it) and starts it again on
   * the same port with the same storage, what a deploy or a crash does; `cron` turns the cron on or off.
   */
  async restartWorker(changes: { cron?: boolean } = {}): Promise<void> {
    this.parts.crons?.stop();
    await this.worker.stop();
    const options = this.parts.workerOptions;
    if (changes.cron !== undefined) options.cron = changes.cron;
    this.worker = await startWorkerProcess(options);
    this.parts.crons = stackCrons(this.worker, options);
  }

  /**
   * Starts another Worker process on the same REST endpoint (the same Redis, the same signing
   * key and vars, `vars` added), with Durable Object storage of its own and no cron: requests
   * to it are served by other isolates than the first process's, as on another machine.
   */
  async startWorker(vars: Record<string, string> = {}): Promise<ExtraWorker> {
    const forget = (w: ExtraWorker) =>
      this.extraWorkers.splice(this.extraWorkers.indexOf(w), this.extraWorkers.includes(w) ? 1 : 0);
    const handle = await startExtraWorker(this.dir, this.parts.workerOptions, vars, forget);
    this.extraWorkers.push(handle);
    return handle;
  }

  /** Fires the cron trigger once (`wrangler dev --test-scheduled`, serve's control socket); resolves with its answer. */
  async sweep(): Promise<{ status: number; text: string }> {
    const res = await fetch(`${this.worker.scheduledUrl}/__scheduled?cron=*+*+*+*+*`);
    return { status: res.status, text: await res.text() };
  }

  /**
   * Fires the cron trigger once and waits for the whole sweep: the run (it answers before its
   * work is done) and the sweep of every context it handed to a dispatcher (the global
   * counters `swept` and `settled`, read straight from redis-server, so no count of commands
   * sent is disturbed). Resolves with the contexts handed over. For tests that fire the sweep
   * one at a time, with the cron off.
   */
  sweepToEnd(timeoutMs = 60_000): Promise<number> {
    const counters = (fields: string[]) =>
      this.redis.exec<(string | null)[]>(["HMGET", this.keys.counters(), ...fields]);
    return sweepToEnd(this.worker.scheduledUrl, this.parts.redisServer ? this.redisUrl : counters, timeoutMs);
  }

  /** Redis's own command counts, by command (INFO commandstats), without INFO itself. */
  async commandStats(): Promise<Map<string, number>> {
    const text = await this.redis.exec<string>(["INFO", "commandstats"]);
    const counts = new Map<string, number>();
    for (const line of text.split("\n")) {
      const m = /^cmdstat_([^:]+):calls=(\d+)/.exec(line.trim());
      if (m && m[1] !== "info") counts.set(m[1] as string, Number(m[2]));
    }
    return counts;
  }

  /** What the REST endpoint sent to Redis since it (re)started: requests and commands (see `RestServer.sent`). */
  restSent(): { requests: number; commands: number } {
    return this.rest?.sent() ?? { requests: 0, commands: 0 };
  }

  /** Records what the REST endpoint sends to Redis until the returned function is called (see `RestServer.record`). */
  restRecord(options?: { keys?: boolean }): () => string[][] {
    return this.runningRest().record(options);
  }

  /** The largest storage request and answer so far (bytes), as the REST endpoint saw them. */
  restLargest(): { request: number; response: number } {
    return this.runningRest().largest();
  }

  /**
   * The command counts once Redis has gone quiet: the same total over `reads` reads in a row,
   * `intervalMs` apart (INFO is not counted, so reading does not disturb it). What the Worker
   * does after an answer (waitUntil work, a Durable Object's relay) is counted this way too.
   */
  async quietCommandStats(reads = 4, intervalMs = 150): Promise<Map<string, number>> {
    const total = (stats: Map<string, number>) => [...stats.values()].reduce((a, b) => a + b, 0);
    let last = await this.commandStats();
    let same = 1;
    return eventually(
      async () => {
        await new Promise((r) => setTimeout(r, intervalMs));
        const now = await this.commandStats();
        same = total(now) === total(last) ? same + 1 : 1;
        last = now;
        return same >= reads ? now : undefined;
      },
      30_000,
      0,
      "Redis going quiet",
    );
  }

  async stop(): Promise<void> {
    const { redisServer, crons } = this.parts;
    if (this.redisPaused && redisServer) process.kill(redisServer.child.pid as number, "SIGCONT");
    await Promise.all(this.children.map((c) => c.kill()));
    crons?.stop();
    await Promise.all([...this.extraWorkers].map((w) => w.stop()));
    await this.worker.stop();
    await this.refusing?.close();
    await this.rest?.close();
    await redisServer?.stop();
    rmSync(this.dir, { recursive: true, force: true });
  }

  /** The stack's own redis-server (none over a Redis Cluster). */
  private redisServer(): RedisServer {
    if (!this.parts.redisServer)
      throw new Error("this stack runs over a Redis Cluster: it has no redis-server of its own");
    return this.parts.redisServer;
  }

  private runningRest(): RestServer {
    if (!this.rest) throw new Error("the REST endpoint is stopped");
    return this.rest;
  }

  /** Starts test/support/test-runner.ts as a process; resolves once it listens. */
  private async spawnTestRunner(
    contextId: number,
    runnerId: number,
    jwk: PrivateJwk,
    extra: Record<string, string> = {},
  ): Promise<TestRunnerProcess> {
    const child = spawn(process.execPath, ["--import", "tsx", "test/support/test-runner.ts"], {
      cwd: root,
      env: {
        ...process.env,
        COORDINATOR_URL: this.url,
        CONTEXT_ID: String(contextId),
        RUNNER_ID: String(runnerId),
        KEY_FILE: writeKeyFile(this.dir, contextId, runnerId, jwk),
        PORT: "0",
        ...extra,
      },
      stdio: ["ignore", "pipe", "inherit"],
    });
    const proc = watchProcess(child, `test runner ${runnerId} of context ${contextId}`);
    this.children.push(proc);
    const line = await proc.waitForLine(/^(listening \d+|pulling)$/);
    return { ...proc, port: Number(line.split(" ")[1] ?? 0) };
  }
}
